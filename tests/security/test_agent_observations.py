"""Hostile agents and hosts against the board's ingest: what one host token (or one
enrollment token) can send to the claim, the observations and the stream.

Every refusal is a 4xx with a string `detail` that stores nothing (checked in the
database); every acceptance is one agent-api.md documents. The served board of
tests/security (two workers, real PostgreSQL) answers.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.security.conftest import db
from tests.security.seed import (
    Host,
    Tenant,
    claim,
    enroll,
    issue_enrollment,
    make_tenant,
    observation,
    push,
    unique,
)
from tests.support.live import LiveBoard, measure_peaks
from tests.support.replies import Reply

CLAIM = "/agent/v1/enrollments/claim"


@pytest.fixture(scope="module")
def other(board: LiveBoard) -> Tenant:
    """A workspace of this module's own (others change the shared one's settings), and
    for what must never cross from one workspace to another."""
    return make_tenant(board, "delta")


@pytest.fixture
def host(board: LiveBoard, other: Tenant) -> Host:
    return enroll(board, other, unique("ingest-edge"))


def stored(board: LiveBoard, host: Host) -> tuple[object, ...]:
    """(observations, GPUs, GPU-hour rows, host-hour rows, newest point) of the host."""
    url = board.env["GUA_BOARD_DATABASE_URL"]
    where = (
        "FROM {} x JOIN hosts h ON h.workspace_id = x.workspace_id AND h.id = x.host_id "
        "WHERE h.public_id = %s::uuid"
    )
    return (
        db(url, "SELECT count(*) " + where.format("raw_history"), host.host_id),
        db(url, "SELECT count(*) " + where.format("gpus"), host.host_id),
        db(url, "SELECT count(*) " + where.format("gpu_hour_rollups"), host.host_id),
        db(url, "SELECT count(*) " + where.format("host_hour_rollups"), host.host_id),
        db(
            url,
            "SELECT latest_observed_at::text || coalesce(hostname, '') FROM hosts "
            "WHERE public_id = %s::uuid",
            host.host_id,
        ),
    )


def refused(reply: Reply, *statuses: int) -> str:
    assert reply.status_code in statuses, reply
    return reply.detail()


def hosts_of(board: LiveBoard, tenant: Tenant) -> list[dict[str, Any]]:
    with board.client(tenant.admin.token) as c:
        reply = board.call(c, "GET", f"/api/v1/workspaces/{tenant.slug}/hosts")
    assert reply.status_code == 200, reply
    found: list[dict[str, Any]] = reply.json()["hosts"]
    return found


def host_view(board: LiveBoard, tenant: Tenant, host: Host) -> dict[str, Any]:
    with board.client(tenant.admin.token) as c:
        reply = board.call(c, "GET", f"/api/v1/workspaces/{tenant.slug}/hosts/{host.host_id}")
    assert reply.status_code == 200, reply
    view: dict[str, Any] = reply.json()
    return view


def gpus(count: int, total_mb: int, base: str = "GPU-big") -> list[dict[str, Any]]:
    return [
        {
            "index": i,
            "uuid": f"{base}-{i}",
            "name": "NVIDIA H200",
            "memoryTotalMb": total_mb,
            "memoryUsedMb": total_mb,
            "utilPct": 100,
            "temperatureC": 60,
            "powerW": 700,
            "processes": [],
        }
        for i in range(count)
    ]


# -- sizes that the board's sums cannot hold ------------------------------------------


def test_gpu_memory_the_rollups_cannot_sum_is_refused(board: LiveBoard, host: Host) -> None:
    """A host's hour (and a GPU's day) is summed as MB x microseconds in bigint: 64 cards
    of 2**31-1 MB for 100 s overflowed the host-hour row, and the push that closed the
    interval was a 503 (one card for 72 min overflowed the day rollup of the workspace).
    Such a card is refused at once, with nothing stored."""
    at = datetime.now(UTC) - timedelta(minutes=10)
    before = stored(board, host)
    for i in range(2):
        body = observation(at + timedelta(seconds=100 * i))
        body["gpus"] = gpus(64, 2**31 - 1)
        detail = refused(push(board, host, body), 422)
        assert "memoryTotalMb" in detail, detail
    assert stored(board, host) == before


def test_the_largest_card_memory_is_summed_exactly(board: LiveBoard, host: Host) -> None:
    """64 cards of the largest memory taken, over whole hours: 202s, and the sums hold."""
    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
    total = 2**20
    for i in range(0, 3 * 3600 + 1, 110):
        body = observation(start + timedelta(seconds=i))
        body["gpus"] = gpus(64, total)
        reply = push(board, host, body)
        assert reply.status_code == 202, reply
    url = board.env["GUA_BOARD_DATABASE_URL"]
    summed = db(
        url,
        "SELECT max(r.memory_total_mb_us) FROM host_hour_rollups r JOIN hosts h "
        "ON h.workspace_id = r.workspace_id AND h.id = r.host_id WHERE h.public_id = %s::uuid",
        host.host_id,
    )
    assert summed == 64 * total * 3_600_000_000, summed


# -- late points in a long run ----------------------------------------------------------

LATE_PUSH_PEAK_MIB = 120


def _seed_a_month_of_one_run(
    board: LiveBoard, host: Host, uuids: tuple[str, ...]
) -> tuple[datetime, datetime]:
    """A month of one unbroken idle run, every 30 s: the first push over HTTP, the rest
    copied in SQL (90,000 pushes would take the test an hour), the host's newest point
    moved to the last copy. Returns the run's start and the last copy's time."""
    url = board.env["GUA_BOARD_DATABASE_URL"]
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(days=30)
    first = observation(start)
    first["gpus"] = gpus(len(uuids), 81920, "GPU-run")
    assert push(board, host, first).status_code == 202
    # From start, not from the clock again: a second crossed in between put the last
    # copy (every 30 s from start) a second before `last`.
    last = start + timedelta(days=30, minutes=-10)
    copied = db(
        url,
        """
        WITH src AS (
            SELECT o.* FROM host_observations o
            JOIN hosts h ON h.workspace_id = o.workspace_id AND h.id = o.host_id
            WHERE h.public_id = %s::uuid),
        ins AS (
            INSERT INTO host_observations
            SELECT s.workspace_id, s.host_id, t, t, s.collection_status, s.errors,
                   s.agent_version, s.driver_version, s.gpu_id, s.gpu_index, s.gpu_util_pct,
                   s.gpu_memory_used_mb, s.gpu_memory_total_mb, s.gpu_temperature_c,
                   s.gpu_power_w, s.gpu_reported_state, s.gpu_state, s.process_gpu_id,
                   s.process_pid, s.process_user, s.process_name, s.process_type,
                   s.process_memory_mb
            FROM src s, generate_series(%s::timestamptz + interval '30 s', %s::timestamptz,
                                        interval '30 s') AS t
            RETURNING 1)
        SELECT count(*) FROM ins
        """,
        host.host_id,
        start,
        last,
    )
    assert isinstance(copied, int)
    assert copied > 80_000, copied
    db(
        url,
        "UPDATE hosts SET latest_observed_at = %s WHERE public_id = %s::uuid RETURNING 1",
        last,
        host.host_id,
    )
    newest = observation(last + timedelta(seconds=30))
    newest["gpus"] = gpus(len(uuids), 81920, "GPU-run")
    assert push(board, host, newest).status_code == 202
    return start, last


def _since(board: LiveBoard, tenant: Tenant, host: Host) -> dict[str, datetime]:
    return {
        g["uuid"]: datetime.fromisoformat(g["stateSince"])
        for g in host_view(board, tenant, host)["gpus"]
    }


def test_a_late_point_in_a_month_long_run_reads_only_around_it(
    board: LiveBoard, other: Tenant, host: Host
) -> None:
    """Was: every late point inside a run re-read the whole run to recompute stateSince,
    so a host with a month of one unbroken run (an idle card) made each late push cost
    seconds and hundreds of MiB of a worker (~4 s, 260 MiB for 20 days of 8 cards),
    and a hostile host could repeat it at will. A late point changes only what it
    touches: the run it breaks starts at the point after it."""
    uuids = tuple(f"GPU-run-{i}" for i in range(8))
    start, newest = _seed_a_month_of_one_run(board, host, uuids)
    assert set(_since(board, other, host).values()) == {start}
    # A busy card 15 s before the newest stored copy, and another ten days into the run.
    breaks = {
        "GPU-run-0": newest - timedelta(seconds=15),
        "GPU-run-1": start + timedelta(days=10, seconds=15),
    }
    for uuid, at in breaks.items():
        body = observation(at)
        body["gpus"] = gpus(len(uuids), 81920, "GPU-run")
        busy = next(g for g in body["gpus"] if g["uuid"] == uuid)
        busy["processes"] = [{"pid": 7, "linuxUser": "mallory", "name": "x", "memoryUsedMb": 1}]
        with measure_peaks(board) as peaks:
            reply = push(board, host, body)
        assert reply.status_code == 202, reply
        assert peaks.worst_mib < LATE_PUSH_PEAK_MIB, (
            f"a late push grew a worker by {peaks.worst_mib:.0f} MiB"
        )
    since = _since(board, other, host)
    assert since["GPU-run-0"] == newest, since
    assert since["GPU-run-1"] == start + timedelta(days=10, seconds=30), since
    assert {since[u] for u in uuids[2:]} == {start}, since


# -- every string field, every number field ---------------------------------------------

STRING_FIELDS: dict[str, Callable[[dict[str, Any], str], None]] = {
    "schemaVersion": lambda b, v: b.__setitem__("schemaVersion", v),
    "observedAt": lambda b, v: b.__setitem__("observedAt", v),
    "an error code": lambda b, v: b.update(collectionStatus="partial", errors=[v]),
    "host.hostname": lambda b, v: b["host"].__setitem__("hostname", v),
    "host.agentVersion": lambda b, v: b["host"].__setitem__("agentVersion", v),
    "host.driverVersion": lambda b, v: b["host"].__setitem__("driverVersion", v),
    "host.hostId": lambda b, v: b["host"].__setitem__("hostId", v),
    "host.displayName": lambda b, v: b["host"].__setitem__("displayName", v),
    "gpus[].uuid": lambda b, v: b["gpus"][0].__setitem__("uuid", v),
    "gpus[].name": lambda b, v: b["gpus"][0].__setitem__("name", v),
    "gpus[].usageState": lambda b, v: b["gpus"][0].__setitem__("usageState", v),
    "processes[].linuxUser": lambda b, v: b["gpus"][0]["processes"][0].__setitem__("linuxUser", v),
    "processes[].name": lambda b, v: b["gpus"][0]["processes"][0].__setitem__("name", v),
    "processes[].type": lambda b, v: b["gpus"][0]["processes"][0].__setitem__("type", v),
}
MARK = "MARK-7f3a"
# What replaces the JSON string "MARK-7f3a" in the body's text.
HOSTILE_STRINGS = {
    "lone high surrogate": '"a\\ud800b"',
    "lone low surrogate": '"\\udfff"',
    "reversed pair": '"\\udc00\\ud800"',
    "NUL": '"a\\u0000"',
    "raw control byte": '"a\x01b"',
    "a megabyte": '"' + "x" * (1024 * 1024) + '"',
    "a number": "5",
    "null": "null",
    "an object": "{}",
    "a list": '["a"]',
}


def _with_string(field: str, raw: str) -> bytes:
    body = observation(users=("alice",))
    STRING_FIELDS[field](body, MARK)
    text = json.dumps(body)
    assert text.count(f'"{MARK}"') == 1, field
    return text.replace(f'"{MARK}"', raw).encode()


@pytest.mark.parametrize("case", sorted(HOSTILE_STRINGS))
def test_hostile_strings_in_every_field(board: LiveBoard, host: Host, case: str) -> None:
    before = stored(board, host)
    for field in STRING_FIELDS:
        if case == "null" and field in ("host.hostId", "host.displayName", "processes[].type"):
            continue  # optional: null is documented as absent
        if case == "null" and field == "gpus[].usageState":
            continue
        reply = push(board, host, _with_string(field, HOSTILE_STRINGS[case]))
        refused(reply, 400, 413, 422)
    assert stored(board, host) == before


NUMBER_FIELDS: dict[str, Callable[[dict[str, Any], Any], None]] = {
    "gpus[].index": lambda b, v: b["gpus"][0].__setitem__("index", v),
    "gpus[].memoryTotalMb": lambda b, v: b["gpus"][0].__setitem__("memoryTotalMb", v),
    "gpus[].memoryUsedMb": lambda b, v: b["gpus"][0].__setitem__("memoryUsedMb", v),
    "gpus[].utilPct": lambda b, v: b["gpus"][0].__setitem__("utilPct", v),
    "gpus[].temperatureC": lambda b, v: b["gpus"][0].__setitem__("temperatureC", v),
    "gpus[].powerW": lambda b, v: b["gpus"][0].__setitem__("powerW", v),
    "processes[].pid": lambda b, v: b["gpus"][0]["processes"][0].__setitem__("pid", v),
    "processes[].memoryUsedMb": lambda b, v: b["gpus"][0]["processes"][0].__setitem__(
        "memoryUsedMb", v
    ),
}
HOSTILE_NUMBERS = {
    "NaN": "NaN",
    "Infinity": "Infinity",
    "-Infinity": "-Infinity",
    "1e400": "1e400",
    "-1e400": "-1e400",
    "2**70": str(2**70),
    "-2**70": str(-(2**70)),
    "2**63": str(2**63),
    "-1": "-1",
    "a float": "1.5",
    "a whole float": "1.0",
    "an exponent": "1e2",
    "a numeric string": '"1"',
    "true": "true",
    "an empty list": "[]",
}


def _with_number(field: str, raw: str) -> bytes:
    body = observation(users=("alice",))
    NUMBER_FIELDS[field](body, MARK)
    text = json.dumps(body)
    return text.replace(f'"{MARK}"', raw).encode()


@pytest.mark.parametrize("case", sorted(HOSTILE_NUMBERS))
def test_hostile_numbers_in_every_field(board: LiveBoard, host: Host, case: str) -> None:
    before = stored(board, host)
    for field in NUMBER_FIELDS:
        reply = push(board, host, _with_number(field, HOSTILE_NUMBERS[case]))
        refused(reply, 400, 422)
    assert stored(board, host) == before


def test_minus_zero_is_zero(board: LiveBoard, other: Tenant, host: Host) -> None:
    """`-0` is JSON for 0: a card at -0 % is a card at 0 %, stored as such."""
    body = _with_number("gpus[].utilPct", "-0")
    assert push(board, host, body).status_code == 202
    gpu = host_view(board, other, host)["gpus"][0]
    assert gpu["utilPct"] == 0, gpu


ERRORS_PEAK_MIB = 100


def _bad_processes_everywhere(process: str) -> bytes:
    body = observation()
    body["gpus"] = gpus(64, 81920, "GPU-bad")
    for gpu in body["gpus"]:
        gpu["processes"] = "MARK"
    text = json.dumps(body)
    return text.replace('"MARK"', "[" + ",".join([process] * 512) + "]").encode()


@pytest.mark.parametrize("process", ['{"a":1,"b":2,"c":3}', "{}", "[]"])
def test_a_body_of_bad_entries_costs_a_worker_little(
    board: LiveBoard, host: Host, process: str
) -> None:
    """Was: 512 bad processes on each of 64 cards (a 660 KB body, under the 1 MiB limit)
    gave 229,376 validation errors, and the worker grew by ~300 MiB to answer a 422.
    A list now stops at its first bad entry; the answer still says what is wrong."""
    body = _bad_processes_everywhere(process)
    assert len(body) < 1024 * 1024
    before = stored(board, host)
    with measure_peaks(board) as peaks:
        reply = push(board, host, body)
    detail = refused(reply, 422)
    assert detail.startswith("gpus.0.processes.0"), detail
    assert len(reply.json()["errors"]) <= 20, reply
    assert peaks.worst_mib < ERRORS_PEAK_MIB, f"a worker grew by {peaks.worst_mib:.0f} MiB"
    assert stored(board, host) == before


# -- transport ----------------------------------------------------------------------

ODD_BODIES = {
    "empty": b"",
    "whitespace": b" \r\n\t ",
    "a BOM alone": b"\xef\xbb\xbf",
    "NUL bytes": b"\x00" * 64,
    "UTF-16": json.dumps(observation()).encode("utf-16"),
    "UTF-32": json.dumps(observation()).encode("utf-32"),
    "latin-1 name": json.dumps(observation(users=("MARK",)))
    .encode()
    .replace(b'"MARK"', b'"J\xfcrgen"'),
    "100,000 GPUs": b'{"gpus": [' + b",".join([b"{}"] * 100_000) + b"]}",
    "100,000 error codes": json.dumps(
        {**observation(), "collectionStatus": "partial", "errors": ["e"] * 100_000}
    ).encode(),
    "an unclosed object": json.dumps(observation()).encode()[:-1],
    "two objects": json.dumps(observation()).encode() * 2,
}


@pytest.mark.parametrize("case", sorted(ODD_BODIES))
def test_odd_bodies_store_nothing(board: LiveBoard, host: Host, case: str) -> None:
    before = stored(board, host)
    refused(push(board, host, ODD_BODIES[case]), 400, 413, 422)
    assert stored(board, host) == before


@pytest.mark.parametrize(
    "content_type",
    [
        "application/json-patch+json",
        "application/problem+json",
        "application/json, text/plain",
        "json",
        "application/",
        "application/json\u00a0",
        "*/*",
    ],
)
def test_near_json_media_types_are_415(board: LiveBoard, host: Host, content_type: str) -> None:
    before = stored(board, host)
    body = json.dumps(observation()).encode()
    try:
        reply = push(board, host, body, headers={"Content-Type": content_type})
    except UnicodeEncodeError:
        return  # the client itself will not send a non-latin-1 header
    refused(reply, 415)
    assert stored(board, host) == before


def test_a_charset_that_is_not_utf8_changes_nothing(board: LiveBoard, host: Host) -> None:
    """The charset parameter is not honoured: the body is read as UTF-8 and a Latin-1
    byte is not valid UTF-8 (400), rather than a mis-decoded name being stored."""
    before = stored(board, host)
    body = json.dumps(observation(users=("MARK",))).encode().replace(b'"MARK"', b'"J\xfcrgen"')
    reply = push(board, host, body, headers={"Content-Type": "application/json; charset=latin-1"})
    refused(reply, 400, 415, 422)
    assert stored(board, host) == before


# -- semantics ------------------------------------------------------------------------


def test_a_uuid_known_in_another_workspace_stays_there(
    board: LiveBoard, scratch: Tenant, other: Tenant
) -> None:
    """GPUs are keyed by host: the same UUID in two workspaces is two GPUs, and neither
    workspace sees the other's model name, users or processes."""
    mine = enroll(board, scratch, unique("uuid-mine"))
    theirs = enroll(board, other, unique("uuid-theirs"))
    uuid = unique("GPU-shared")
    secret_user = unique("secretuser").replace("-", "")
    body = observation(users=(secret_user,), gpu_uuids=(uuid,), gpu_names=("THEIR SECRET GPU",))
    assert push(board, theirs, body).status_code == 202
    mine_body = observation(gpu_uuids=(uuid,), gpu_names=("MY GPU",))
    assert push(board, mine, mine_body).status_code == 202
    url = board.env["GUA_BOARD_DATABASE_URL"]
    assert db(url, "SELECT count(DISTINCT id) FROM gpus WHERE uuid = %s", uuid) == 2
    seen = json.dumps(hosts_of(board, scratch))
    assert "THEIR SECRET GPU" not in seen
    assert secret_user not in seen
    theirs_seen = json.dumps(hosts_of(board, other))
    assert "MY GPU" not in theirs_seen
    assert theirs_seen.count(uuid) == 1


def test_a_host_naming_itself_like_another_touches_only_itself(
    board: LiveBoard, scratch: Tenant
) -> None:
    victim = enroll(board, scratch, unique("victim"))
    assert push(board, victim, observation()).status_code == 202
    before = host_view(board, scratch, victim)
    attacker = enroll(board, scratch, unique("attacker"))
    body = observation()
    body["host"].update(
        hostname=before["hostname"], hostId=victim.host_id, displayName=victim.display_name
    )
    assert push(board, attacker, body).status_code == 202
    after = host_view(board, scratch, victim)
    assert (after["displayName"], after["lastSeenAt"]) == (
        before["displayName"],
        before["lastSeenAt"],
    )
    mine = host_view(board, scratch, attacker)
    assert mine["displayName"] == attacker.display_name  # set at enrollment only
    assert mine["hostId"] == attacker.host_id


def test_two_cards_with_one_index(board: LiveBoard, other: Tenant, host: Host) -> None:
    """Only UUIDs must differ within a snapshot (agent-api.md): two cards reporting the
    same index are two cards, both shown, and the host's pages still answer."""
    body = observation(gpu_uuids=("GPU-dup-a", "GPU-dup-b"))
    for gpu in body["gpus"]:
        gpu["index"] = 0
    assert push(board, host, body).status_code == 202
    shown = host_view(board, other, host)["gpus"]
    assert sorted(g["uuid"] for g in shown) == ["GPU-dup-a", "GPU-dup-b"], shown
    with board.client(other.admin.token) as c:
        for path in ("/hosts", f"/hosts/{host.host_id}/history"):
            reply = board.call(c, "GET", f"/api/v1/workspaces/{other.slug}{path}")
            assert reply.status_code in (200, 404), reply


def test_processes_above_the_card_and_unknown_memory(
    board: LiveBoard, other: Tenant, host: Host
) -> None:
    """Documented: process memory has no upper bound and may be null."""
    body = observation(users=("alice", "bob"))
    procs = body["gpus"][0]["processes"]
    procs[0]["memoryUsedMb"] = 2**53
    procs[1]["memoryUsedMb"] = None
    assert push(board, host, body).status_code == 202
    shown = host_view(board, other, host)["gpus"]
    first = next(g for g in shown if g["uuid"] == body["gpus"][0]["uuid"])
    memory = {p["linuxUser"]: p["memoryUsedMb"] for p in first["processes"]}
    assert memory == {"alice": 2**53, "bob": None}, memory


@pytest.mark.parametrize(
    "offset",
    ["+14:00", "-12:00", "+05:45", "-00:30", "+00:00:01", "+23:59", "-23:59:59.999999", "Z"],
)
def test_recent_times_in_odd_offsets_are_stored_in_utc(
    board: LiveBoard, host: Host, offset: str
) -> None:
    now = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)
    if offset == "Z":
        local, delta = now.replace(tzinfo=None), timedelta(0)
    else:
        sign = -1 if offset[0] == "-" else 1
        parts = [float(p) for p in offset[1:].split(":")]
        delta = sign * timedelta(
            hours=parts[0], minutes=parts[1], seconds=parts[2] if len(parts) > 2 else 0
        )
        local = (now + delta).replace(tzinfo=None)
    body = observation()
    body["observedAt"] = local.isoformat() + offset
    reply = push(board, host, body)
    assert reply.status_code == 202, reply
    assert datetime.fromisoformat(reply.json()["observedAt"]) == now, reply
    # The same instant spelled in UTC is the same observation.
    again = copy.deepcopy(body)
    again["observedAt"] = now.isoformat()
    assert push(board, host, again).json()["duplicate"] is True


@pytest.mark.parametrize(
    ("status", "errors", "listed"),
    [
        ("ok", ["process_list_unavailable"], True),
        ("partial", [], True),
        ("error", [], False),
        ("error", ["nvml_init_failed"] * 33, False),
        ("error", ["x" * 65], False),
        ("error", [""], False),
        ("OK", [], True),
        ("", [], True),
    ],
)
def test_status_and_error_combinations_the_contract_forbids(
    board: LiveBoard, host: Host, status: str, errors: list[str], listed: bool
) -> None:
    body = observation()
    body.update(collectionStatus=status, errors=errors)
    if not listed:
        body["gpus"] = []
    before = stored(board, host)
    refused(push(board, host, body), 422)
    assert stored(board, host) == before


def test_a_heartbeat_proves_life_but_counts_no_gpu_time(
    board: LiveBoard, other: Tenant, host: Host
) -> None:
    at = datetime.now(UTC) - timedelta(minutes=2)
    assert push(board, host, observation(at)).status_code == 202
    beat = observation(at + timedelta(seconds=60))
    beat.update(collectionStatus="error", errors=["nvml_init_failed"], gpus=[])
    beat["host"]["driverVersion"] = "unknown"
    assert push(board, host, beat).status_code == 202
    view = host_view(board, other, host)
    assert (view["collectionStatus"], view["freshness"]) == ("error", "error"), view
    assert view["errors"] == ["nvml_init_failed"], view


# -- enrollment ---------------------------------------------------------------------


def _claim(board: LiveBoard, body: dict[str, Any] | bytes) -> Reply:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    with board.client() as c:
        return board.call(
            c, "POST", CLAIM, content=content, headers={"Content-Type": "application/json"}
        )


def _hosts_count(board: LiveBoard, tenant: Tenant) -> object:
    url = board.env["GUA_BOARD_DATABASE_URL"]
    return db(
        url,
        "SELECT count(*) FROM hosts h JOIN workspaces w ON w.id = h.workspace_id WHERE w.slug = %s",
        tenant.slug,
    )


def _token_state(board: LiveBoard, tenant: Tenant, token: str) -> str:
    prefix = "_".join(token.split("_")[:3])
    with board.client(tenant.admin.token) as c:
        reply = board.call(c, "GET", f"/api/v1/workspaces/{tenant.slug}/enrollment-tokens")
    for t in reply.json()["enrollmentTokens"]:
        if t["tokenPrefix"] == prefix:
            return str(t["state"])
    raise LookupError(prefix)


def test_an_expired_token_is_refused_like_an_unknown_one(board: LiveBoard, other: Tenant) -> None:
    with board.client(other.admin.token) as c:
        reply = board.call(
            c,
            "POST",
            f"/api/v1/workspaces/{other.slug}/enrollment-tokens",
            json={"expiresInHours": 0.0003},  # about a second
        )
    assert reply.status_code == 201, reply
    token = reply.json()["enrollmentToken"]
    board.remember(token)
    deadline = time.monotonic() + 60
    while _token_state(board, other, token) != "expired":
        assert time.monotonic() < deadline, "the token never expired"
        time.sleep(0.5)
    before = _hosts_count(board, other)
    expired = refused(_claim(board, {"enrollmentToken": token, "hostname": "late"}), 401)
    unknown = refused(_claim(board, {"enrollmentToken": token[:-4] + "AAAA"}), 401)
    assert expired == unknown
    assert _hosts_count(board, other) == before
    assert _token_state(board, other, token) == "expired"


def test_a_revoked_or_used_token_is_refused(board: LiveBoard, other: Tenant) -> None:
    revoked = issue_enrollment(board, other)
    prefix = "_".join(revoked.split("_")[:3])
    with board.client(other.admin.token) as c:
        reply = board.call(
            c, "DELETE", f"/api/v1/workspaces/{other.slug}/enrollment-tokens/{prefix}"
        )
    assert reply.status_code == 200, reply
    used = issue_enrollment(board, other)
    claim(board, used, unique("first"))
    before = _hosts_count(board, other)
    for token in (revoked, used, f"  {used}\n", used.upper()):
        refused(_claim(board, {"enrollmentToken": token, "hostname": "again"}), 401)
    assert _hosts_count(board, other) == before
    assert _token_state(board, other, revoked) == "revoked"


def test_a_refused_claim_body_spends_no_token(board: LiveBoard, other: Tenant) -> None:
    token = issue_enrollment(board, other)
    before = _hosts_count(board, other)
    bad: list[dict[str, Any] | bytes] = [
        {"enrollmentToken": token, "hostname": "a\u0000b"},
        {"enrollmentToken": token, "hostname": "h" * 256},
        {"enrollmentToken": token, "agentVersion": "v" * 65},
        {"enrollmentToken": token, "hostname": 7},
        {"enrollmentToken": token, "extra": 1},
        {"enrollmentToken": token, "hostname": None, "driverVersion": ["x"]},
        json.dumps({"enrollmentToken": token}).encode().replace(b"}", b', "hostname": "\\ud800"}'),
        json.dumps({"enrollmentToken": token}).encode() + b"{}",
    ]
    for body in bad:
        refused(_claim(board, body), 400, 422)
    assert _hosts_count(board, other) == before
    assert _token_state(board, other, token) == "active"
    won = _claim(board, {"enrollmentToken": token})
    assert won.status_code == 201, won
    board.remember(won.json()["agentToken"])


@pytest.mark.parametrize(
    ("hostname", "shown"),
    [
        ("   ", None),
        ("\u202egnp.exe", "\u202egnp.exe"),
        ("<script>alert(1)</script>", "<script>alert(1)</script>"),
        ('=HYPERLINK("http://x")', '=HYPERLINK("http://x")'),
        ("  padded  ", "padded"),
        ("\U0001f600" * 255, "\U0001f600" * 255),
    ],
)
def test_hostile_claim_names_are_kept_as_text(
    board: LiveBoard, other: Tenant, hostname: str, shown: str | None
) -> None:
    token = issue_enrollment(board, other)
    reply = _claim(board, {"enrollmentToken": token, "hostname": hostname})
    assert reply.status_code == 201, reply
    answer = reply.json()
    board.remember(answer["agentToken"])
    assert all(isinstance(answer[k], str) and answer[k] for k in answer), answer
    if shown is None:
        assert answer["displayName"].startswith("host-"), answer
    else:
        assert answer["displayName"] == shown, answer


def test_a_claim_named_like_an_existing_host_is_a_host_of_its_own(
    board: LiveBoard, other: Tenant
) -> None:
    first = enroll(board, other, unique("twin"))
    second = claim(board, issue_enrollment(board, other), first.display_name)
    assert second.display_name == first.display_name
    assert second.host_id != first.host_id
    assert second.prefix != first.prefix
    assert push(board, second, observation()).status_code == 202
    assert host_view(board, other, first)["lastSeenAt"] is None


def test_concurrent_claims_with_different_names_make_one_host(
    board: LiveBoard, other: Tenant
) -> None:
    token = issue_enrollment(board, other)
    before = _hosts_count(board, other)

    def one(i: int) -> Reply:
        return _claim(board, {"enrollmentToken": f" {token} " if i % 2 else token})

    with ThreadPoolExecutor(8) as pool:
        replies = list(pool.map(one, range(16)))
    won = [r for r in replies if r.status_code == 201]
    for r in won:
        board.remember(r.json()["agentToken"])
    assert len(won) == 1, [r.status_code for r in replies]
    for r in replies:
        if r.status_code != 201:
            refused(r, 401)
    assert _hosts_count(board, other) == int(str(before)) + 1


# -- the live stream ----------------------------------------------------------------


def _util_frame(ts: float, gpus_: list[dict[str, Any]] | str) -> str:
    return json.dumps({"type": "util", "ts": ts, "gpus": gpus_})


def _card(uuid: str = "GPU-s-0", util: Any = 7, mem: Any = 1) -> dict[str, Any]:
    return {"deviceUuid": uuid, "utilPct": util, "memUsedMb": mem}


def test_stream_messages_the_board_cannot_show_are_dropped(board: LiveBoard, other: Tenant) -> None:
    """Each is dropped and counted, the socket stays open, and the next good message is
    shown: 65 cards, repeated UUIDs, out-of-range or mistyped numbers, odd `ts`."""
    import asyncio

    import websockets

    streamer = enroll(board, other, unique("streamer"))
    now = datetime.now(UTC).timestamp()
    bad = [
        _util_frame(now, [_card(f"GPU-{i}") for i in range(65)]),
        _util_frame(now, [_card(), _card()]),
        _util_frame(now, [_card(util=101)]),
        _util_frame(now, [_card(util=-1)]),
        _util_frame(now, [_card(util=7.5)]),
        _util_frame(now, [_card(util=True)]),
        _util_frame(now, [_card(mem=-1)]),
        _util_frame(now, [_card(mem=2**70)]),
        _util_frame(now, [_card(uuid="")]),
        _util_frame(now, [_card(uuid="u" * 129)]),
        _util_frame(0, [_card()]),
        _util_frame(now, "GPU-s-0"),
        json.dumps({"type": "util", "ts": str(now), "gpus": [_card()]}),
        json.dumps({"type": "UTIL", "ts": now, "gpus": [_card()]}),
        json.dumps({"type": "util", "ts": True, "gpus": [_card()]}),
        '{"type": "util", "ts": 1e400, "gpus": []}',
        '{"type": "util", "ts": -Infinity, "gpus": []}',
    ]
    good = _util_frame(now, [_card("GPU-s-good", 42, 4242)])
    url = board.url.replace("http", "ws", 1) + "/agent/v1/stream"

    async def send() -> None:
        async with websockets.connect(url, additional_headers=streamer.auth, open_timeout=30) as ws:
            for frame in [*bad, good]:
                await ws.send(frame)
                await asyncio.sleep(0.25)  # past the per-connection spacing
            await asyncio.sleep(0.5)

    asyncio.run(send())
    deadline = time.monotonic() + 60
    with board.client(other.admin.token) as c:
        while True:
            latest = board.call(c, "GET", f"/api/v1/workspaces/{other.slug}/stream/latest")
            assert latest.status_code == 200, latest
            hosts = {h["hostId"]: h for h in latest.json()["hosts"]}
            if streamer.host_id in hosts:
                break
            assert time.monotonic() < deadline, f"the good message never arrived: {latest}"
            time.sleep(0.5)
    shown = hosts[streamer.host_id]
    assert shown["gpus"] == [{"uuid": "GPU-s-good", "utilPct": 42, "memoryUsedMb": 4242}]
    assert shown["dropped"] == len(bad), shown
