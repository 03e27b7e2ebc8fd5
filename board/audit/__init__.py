"""Audit log: who did what, when and from where, for every admin action and sign-in."""
