"""The released `gua` 1.8.0 runs `gua sync-archive` against a live board.

One host's local history has a closed day the board never received live; a second
host (another workspace) got the very same ticks pushed live. Once the archive is
back-filled, the first host's figures for that day equal the second's, and a second
`sync-archive` uploads nothing and changes no figure.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg

from tests.support.live import LiveBoard, clean_env

# Run by the agent's own Python: its database code, its fake GPUs, its usage-state
# tracker and its payload builder, for the same ticks a daemon would have recorded.
HISTORY = r"""
import json, sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from gpu_usage_audit.cloud.snapshot import build_observation_payload, derive_collection_status
from gpu_usage_audit.db import open_db, start_daemon_run, write_snapshot
from gpu_usage_audit.model import HostMeta
from gpu_usage_audit.tier import FakeTier
from gpu_usage_audit.usage_state import UsageStateTracker

db, out = Path(sys.argv[1]), Path(sys.argv[2])
day = datetime.now(UTC).date() - timedelta(days=1)
start = datetime(day.year, day.month, day.day, 9, 59, 13, tzinfo=UTC)
db.parent.mkdir(parents=True, exist_ok=True)
conn = open_db(db)
tier, tracker = FakeTier(), UsageStateTracker()
host = HostMeta("vm", "bare", tier.probe(), start)
payloads = []
for run in range(2):  # the daemon restarted once, after a gap
    first = start + timedelta(hours=run, minutes=7 * run)
    run_id = start_daemon_run(conn, first, timedelta(seconds=30))
    for i in range(70):
        ts = first + timedelta(seconds=30 * i, microseconds=(i * 104729) % 1_000_000)
        snap = tier.collect(ts)
        tracker.apply(snap)
        write_snapshot(conn, ts, host, snap, run_id=run_id)
        status, errors = derive_collection_status(snap)
        payloads.append(build_observation_payload(
            snapshot=snap, hostname="vm", driver_version=tier.probe(), agent_version="1.8.0",
            observed_at=ts, collection_status=status, errors=errors))
conn.close()
out.write_text(json.dumps(payloads))
"""


def _run(args: list[str], home: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, env=clean_env({"HOME": str(home)}), capture_output=True, text=True, timeout=120
    )


def _enroll(gua: Path, board: LiveBoard, workspace: str, home: Path) -> dict[str, str]:
    home.mkdir()
    issued = board.cli_json("issue-token", "--workspace", workspace, "--display-name", "gpu-01")
    done = _run(
        [
            str(gua),
            "enroll",
            "--server-url",
            board.url,
            "--enrollment-token",
            issued["enrollmentToken"],
        ],
        home,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    config: dict[str, str] = json.loads((home / ".gua" / "cloud.json").read_text())
    return config


def _backfill(board: LiveBoard, pat: str, workspace: str, host_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        r = httpx.get(
            f"{board.url}/api/v1/workspaces/{workspace}/hosts/{host_id}/archives",
            headers={"Authorization": f"Bearer {pat}"},
        )
        assert r.status_code == 200, r.text
        jobs = r.json()["backfills"]
        if jobs and all(j["status"] in ("done", "failed") for j in jobs):
            [job] = jobs
            return dict(job)
        assert time.monotonic() < deadline, jobs
        time.sleep(0.2)


def _figures(board: LiveBoard, pat: str, workspace: str, day: str) -> dict[str, Any]:
    """The day's usage and utilization reports, host identities left out."""
    end = (datetime.fromisoformat(day) + timedelta(days=1)).date().isoformat()
    out: dict[str, Any] = {}
    for name, query in (
        ("usage", "groupBy=user"),
        ("usage", "groupBy=gpu"),
        ("utilization", "groupBy=gpu&bucket=hour"),
    ):
        r = httpx.get(
            f"{board.url}/api/v1/workspaces/{workspace}/reports/{name}?from={day}&to={end}&{query}",
            headers={"Authorization": f"Bearer {pat}"},
        )
        if r.status_code == 404 and name == "usage":
            return {}  # no reports on this board yet: the rollups below still compare
        assert r.status_code == 200, r.text
        body = r.json()
        rows = [
            {k: v for k, v in row.items() if k not in ("hostId", "displayName")}
            for row in body["rows"]
        ]
        out[f"{name}?{query}"] = (rows, body.get("totals"), body.get("coverage"))
    return out


def _rollups(database_url: str, workspace: str) -> tuple[list[Any], list[Any]]:
    with psycopg.connect(database_url) as conn:
        gpu = conn.execute(
            """
            SELECT g.uuid, r.hour_start, r.covered_us, r.active_us, r.idle_held_us, r.idle_us,
                   r.util_pct_us, r.memory_used_mb_us, r.memory_total_mb_us, r.sample_count
            FROM gpu_hour_rollups r
            JOIN gpus g ON g.workspace_id = r.workspace_id AND g.id = r.gpu_id
            JOIN workspaces w ON w.id = r.workspace_id
            WHERE w.slug = %s ORDER BY 1, 2
            """,
            [workspace],
        ).fetchall()
        user = conn.execute(
            """
            SELECT g.uuid, r.linux_user, r.hour_start, r.held_us, r.active_us, r.idle_held_us
            FROM user_hour_rollups r
            JOIN gpus g ON g.workspace_id = r.workspace_id AND g.id = r.gpu_id
            JOIN workspaces w ON w.id = r.workspace_id
            WHERE w.slug = %s ORDER BY 1, 2, 3
            """,
            [workspace],
        ).fetchall()
    return gpu, user


def test_sync_archive_backfills_a_day_the_board_never_saw(
    gua_agent: Callable[[str], Path], live_board: LiveBoard, database_url: str, tmp_path: Path
) -> None:
    gua = gua_agent("1.8.0")
    python = gua.parent / "python"
    pats = {}
    for workspace in ("pushed", "archived"):
        live_board.cli("create-workspace", workspace)
        member = live_board.cli_json(
            "create-user",
            f"lead@{workspace}.example",
            "--workspace",
            workspace,
            "--role",
            "member",
        )
        pats[workspace] = member["apiToken"]
    pushed = _enroll(gua, live_board, "pushed", tmp_path / "pushed")
    archived = _enroll(gua, live_board, "archived", tmp_path / "archived")

    home = tmp_path / "archived"
    payloads_file = tmp_path / "payloads.json"
    made = _run(
        [str(python), "-c", HISTORY, str(home / ".gua" / "gua.db"), str(payloads_file)], home
    )
    assert made.returncode == 0, made.stderr
    payloads = json.loads(payloads_file.read_text())
    day = payloads[0]["observedAt"][:10]
    assert day == (datetime.now(UTC).date() - timedelta(days=1)).isoformat()

    # The reference: the same ticks, pushed live by the other host.
    with httpx.Client(base_url=live_board.url, trust_env=False) as client:
        for payload in payloads:
            r = client.post(
                "/agent/v1/observations",
                json=payload,
                headers={"Authorization": f"Bearer {pushed['agentToken']}"},
            )
            assert r.status_code == 202, r.text

    synced = _run([str(gua), "sync-archive"], home)
    assert synced.returncode == 0, synced.stdout + synced.stderr
    assert "1 closed day(s) in 30d window, uploaded 2 missing object(s)" in synced.stdout

    job = _backfill(live_board, pats["archived"], "archived", archived["hostId"])
    assert job["status"] == "done", job
    assert (job["ticks"], job["added"], job["errors"]) == (len(payloads), len(payloads), 0), job

    expected = _figures(live_board, pats["pushed"], "pushed", day)
    figures = _figures(live_board, pats["archived"], "archived", day)
    assert figures == expected
    if expected:  # the reports exist: they have the day's users in them
        assert {r["user"] for r in expected["usage?groupBy=user"][0]} == {"alice", "bob", "unknown"}
    rollups = _rollups(database_url, "archived")
    assert rollups[0]
    assert rollups[1]
    assert rollups == _rollups(database_url, "pushed")

    again = _run([str(gua), "sync-archive"], home)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "uploaded 0 missing object(s)" in again.stdout
    time.sleep(1)  # anything the second run queued would have run by now
    assert (
        _backfill(live_board, pats["archived"], "archived", archived["hostId"])["status"] == "done"
    )
    assert _figures(live_board, pats["archived"], "archived", day) == expected
    assert _rollups(database_url, "archived") == rollups
