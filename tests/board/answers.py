"""What an in-process answer (the app and a real PostgreSQL, no served board) must be: a
refusal is a 4xx with a non-empty string detail and no token secret; and how many audit
entries a workspace has, to show that a refusal recorded nothing."""

from __future__ import annotations

import re
from typing import Any

import httpx

from tests.board.db import scalar

TOKEN = re.compile(r"gua_(?:agent|pat|enroll|cal)_[0-9a-f]{8}_[A-Za-z0-9_-]{20,}")


def refused(r: httpx.Response, *codes: int) -> str:
    """A 4xx (one of codes if given) with a JSON string detail and no token secret."""
    assert 400 <= r.status_code < 500, (r.status_code, r.request.url, r.text[:300])
    if codes:
        assert r.status_code in codes, (r.status_code, r.request.url, r.text[:300])
    detail = r.json()["detail"]
    assert isinstance(detail, str), r.text[:300]
    assert detail, r.text[:300]
    assert not TOKEN.search(r.text), r.text[:300]
    return detail


async def audit_rows(app: Any, slug: str) -> int:
    """How many audit entries the workspace has."""
    found = await scalar(
        app,
        "SELECT count(*) FROM audit_events e JOIN workspaces w ON w.id = e.workspace_id "
        "WHERE w.slug = %s",
        slug,
    )
    return int(found)


async def token_rows(app: Any, slug: str) -> int:
    found = await scalar(
        app,
        "SELECT count(*) FROM enrollment_tokens t JOIN workspaces w ON w.id = t.workspace_id "
        "WHERE w.slug = %s",
        slug,
    )
    return int(found)
