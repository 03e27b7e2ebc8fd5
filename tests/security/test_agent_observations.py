"""Observations of a hostile agent against the board's ingest: hostile strings and
numbers in every field, sizes its sums cannot hold, statuses and errors the contract
forbids, times in odd offsets, cards that share an index or report processes above their
memory, heartbeats, a late point in a month-long run (it reads only around itself), and
bodies of bad entries (a worker stays small).

Every refusal is a 4xx with a string `detail` that stores nothing (checked in the
database); every acceptance is one agent-api.md documents. The served board of
tests/security (two workers, real PostgreSQL) answers.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.security.checks import host_view
from tests.security.conftest import db
from tests.security.seed import (
    Host,
    Tenant,
    enroll,
    observation,
    push,
    unique,
)
from tests.support.live import LiveBoard, measure_peaks
from tests.support.replies import refused


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
