"""Reservations: GPUs booked ahead, compared with what really ran."""
