"""Capacity: which GPUs are free now, or unbooked through a future range, best fit first."""
