"""Scheduler jobs: the allocations a scheduler (Slurm) made, and what their GPUs did."""
