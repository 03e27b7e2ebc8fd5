"""Moved to board.maintenance; kept until board/app.py and board/demo.py import it there."""

from board.maintenance import maintain_once, maintenance_loop

__all__ = ["maintain_once", "maintenance_loop"]
