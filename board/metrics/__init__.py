"""The board's own Prometheus metrics, multiprocess-safe across workers (a kit module).

`registry` defines every metric object (import them from there); `exposition` renders
`/metrics` (one process, or every worker's files under PROMETHEUS_MULTIPROC_DIR);
`http` times the report routes; metrics computed at scrape time come from the domains
(`app.state.scrape_time_families`, e.g. board.hosts.freshness_metric).
No label ever names a workspace, a host or a person.
"""
