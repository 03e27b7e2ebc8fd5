"""The raw history: every observation a host pushed, kept for the raw retention.

Owns `host_observations` (hot rows, one partition a day), `observation_hours` (closed
days compacted to one row per host and hour) and the readers' `raw_observations(…)`,
`gpu_samples` and `process_samples`: their daily partitions, compaction and retention.
Ingest writes the rows; rollups, the host pages and archives read them.
"""
