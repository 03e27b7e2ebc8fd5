"""Notices: idle-held GPUs, idle bookings and unhealthy hosts told to the right people,
through a durable outbox."""
