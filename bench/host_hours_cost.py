"""What keeping host-hour rollups costs ingest: a bench run with the trigger, or without.

    .venv/bin/python bench/host_hours_cost.py {with,without} write_path [write_path.py args]
    .venv/bin/python bench/host_hours_cost.py {with,without} ingest [ingest.py args]

Runs bench/write_path.py (the write path alone, PostgreSQL backend CPU per observation)
or bench/ingest.py (the served board under load) as they are, except that `without`
disables the statement triggers on gpu_hour_rollups that keep host_hour_rollups right
once the scratch database is migrated, so the two runs differ by the trigger only. Run
`with` and `without` alternately; the machine's speed drifts.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import board.db.migrate as migrate  # noqa: E402

TRIGGERS = [f"gpu_hour_rollups_to_hosts_{event}" for event in ("insert", "update", "delete")]


def main() -> int:
    if len(sys.argv) < 3 or sys.argv[1] not in ("with", "without"):
        raise SystemExit(__doc__)
    mode, bench, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
    upgrade = migrate.upgrade

    def upgrade_then_drop_trigger(url: str, *args: Any, **kwargs: Any) -> Any:
        result = upgrade(url, *args, **kwargs)
        if mode == "without":
            with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn:
                for trigger in TRIGGERS:
                    conn.execute(f"ALTER TABLE gpu_hour_rollups DISABLE TRIGGER {trigger}")
            print("host-hour triggers disabled", file=sys.stderr)
        return result

    migrate.upgrade = upgrade_then_drop_trigger  # type: ignore[assignment]
    if bench == "write_path":
        import write_path

        write_path.upgrade = upgrade_then_drop_trigger  # type: ignore[assignment]
        sys.argv = ["write_path.py", *rest]
        write_path.main()
        return 0
    if bench == "ingest":
        import ingest

        return int(ingest.main(rest))
    raise SystemExit(f"unknown bench {bench!r}")


if __name__ == "__main__":
    raise SystemExit(main())
