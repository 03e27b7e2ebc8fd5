"""gpu state since

Issue 14 (fleet at scale): how long each GPU has been in its state (`stateSince`).

No schema change: each GPU's run start travels in the host row's `latest_tick` (a 7th
element per GPU, board.ingest.normalize.encode_tick). A tick written before has six;
the write path recomputes the host's run starts from its raw samples at the host's next
push (board.ingest.state_since), and the API shows null until then. So both directions
are no-ops: an older board ignores the extra element.

Revision ID: a14b3f8d6e03
Revises: a18e7d2c9f02
Create Date: 2026-12-03 17:00:00
"""

from collections.abc import Sequence

revision: str = "a14b3f8d6e03"
down_revision: str | None = "a18e7d2c9f02"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
