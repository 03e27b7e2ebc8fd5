"""The board's own Prometheus metrics, multiprocess-safe across workers (a kit module)."""
