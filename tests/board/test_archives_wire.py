"""The archive endpoints on the wire: key order, `+00:00` times (never "Z"), the host's
archive status for every role, and /docs naming the same fields in the same order."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import httpx

from tests.board.builders import enroll, make_tenant
from tests.board.test_archives import (
    DAEMON_RUN,
    archive_of,
    backfill_of,
    bearer,
    device_table,
    gz_csv,
    make_ticks,
    upload,
    yesterday,
)

UPLOAD_KEYS = ["date", "table", "rows", "sizeBytes", "backfill"]
ARCHIVE_KEYS = ["date", "table", "sizeBytes", "rows", "uploadedAt"]
BACKFILL_KEYS = [
    "date",
    "status",
    "reason",
    "rowsRead",
    "ticks",
    "added",
    "skipped",
    "skippedReasons",
    "errors",
    "errorSamples",
    "attempts",
    "requestedAt",
    "startedAt",
    "finishedAt",
]


def _utc(text: str) -> datetime:
    assert text.endswith("+00:00"), text
    return datetime.fromisoformat(text)


async def test_upload_list_status_and_prune_shapes(app: Any, client: httpx.AsyncClient) -> None:
    tenant = await make_tenant(app, "acme")
    host = await enroll(client, tenant)
    ticks = make_ticks(yesterday() + timedelta(hours=9), n=4)
    day = ticks[0].ts.date().isoformat()
    gpu, proc = archive_of(ticks)

    answers = []
    for table, date, body in (
        ("gpu_sample", day, gpu),
        ("proc_sample", day, proc),
        ("daemon_run", "_full", gz_csv(DAEMON_RUN, [[1, day, 30.0]])),
        ("gpu_device", "_full", device_table()),
    ):
        r = await upload(client, host, table, date, body)
        assert r.status_code == 201, r.text
        assert list(r.json()) == UPLOAD_KEYS
        answers.append((r.json()["table"], r.json()["date"], r.json()["backfill"]))
    # The day waits for its second table; a whole table queues no day of its own.
    assert answers == [
        ("gpu_sample", day, "waiting"),
        ("proc_sample", day, "pending"),
        ("daemon_run", "_full", None),
        ("gpu_device", "_full", None),
    ]

    listed = await client.get("/agent/v1/archives", headers=bearer(host))
    assert listed.status_code == 200, listed.text
    assert list(listed.json()) == ["archives"]
    for archive in listed.json()["archives"]:
        assert list(archive) == ARCHIVE_KEYS
        _utc(archive["uploadedAt"])

    job = await backfill_of(client, tenant, host, day)
    assert list(job) == BACKFILL_KEYS
    assert job["status"] == "done", job
    assert _utc(job["requestedAt"]) <= _utc(job["finishedAt"])
    _utc(job["startedAt"])
    for role in ("admin", "member", "finance"):  # the host inventory's readers
        r = await client.get(
            f"/api/v1/workspaces/acme/hosts/{host['hostId']}/archives", headers=tenant.auth(role)
        )
        assert r.status_code == 200, r.text
        assert list(r.json()) == ["hostId", "archives", "backfills"]
        assert r.json()["hostId"] == host["hostId"]
        assert [list(a) for a in r.json()["archives"]] == [ARCHIVE_KEYS] * 4

    pruned = await client.delete("/agent/v1/archives?olderThanDays=0", headers=bearer(host))
    assert pruned.status_code == 200, pruned.text
    assert pruned.json() == {"deleted": 2}


async def test_docs_show_the_archive_answers(app: Any) -> None:
    spec = app.openapi()
    schemas = spec["components"]["schemas"]
    for method, path, status, model in (
        ("get", "/agent/v1/archives", "200", "ArchiveListOut"),
        ("post", "/agent/v1/archives", "201", "UploadOut"),
        ("delete", "/agent/v1/archives", "200", "PruneOut"),
        ("get", "/api/v1/workspaces/{slug}/hosts/{host_id}/archives", "200", "HostArchivesOut"),
    ):
        content = spec["paths"][path][method]["responses"][status]["content"]
        assert content["application/json"]["schema"] == {"$ref": f"#/components/schemas/{model}"}
    assert list(schemas["UploadOut"]["properties"]) == UPLOAD_KEYS
    assert list(schemas["ArchiveOut"]["properties"]) == ARCHIVE_KEYS
    assert list(schemas["BackfillOut"]["properties"]) == BACKFILL_KEYS
