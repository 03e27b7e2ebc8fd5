"""The identity tables moved to the kit (board.auth.models); kept importable from here."""

from board.auth.models import ROLES, ApiToken, Membership, User, Workspace

__all__ = ["ROLES", "ApiToken", "Membership", "User", "Workspace"]
