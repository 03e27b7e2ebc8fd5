"""The fleet as people see it: each host with its newest GPUs, processes, freshness,
rejected pushes and availability for booking; search and sort; recent charts."""
