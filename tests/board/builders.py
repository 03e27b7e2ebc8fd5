"""Builders for board tests: workspaces, people, enrolled hosts, agent payloads."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from board.runtime import Runtime
from board.workspaces import service as workspaces

EXAMPLES = Path(__file__).resolve().parents[2].parent / "shared" / "contract" / "examples"
LOCAL_EXAMPLES = Path(__file__).resolve().parent / "examples"


def example(name: str) -> dict[str, Any]:
    """A captured request body (shared/contract/examples, or the copy kept in tests)."""
    for folder in (EXAMPLES, LOCAL_EXAMPLES):
        path = folder / name
        if path.exists():
            data: dict[str, Any] = json.loads(path.read_text())
            return data
    raise FileNotFoundError(name)


def retimed(payload: dict[str, Any], at: datetime | None = None) -> dict[str, Any]:
    body = copy.deepcopy(payload)
    body["observedAt"] = (at or datetime.now(UTC)).isoformat()
    return body


@dataclass
class Tenant:
    slug: str
    admin_token: str
    member_token: str
    finance_token: str

    def auth(self, role: str = "admin") -> dict[str, str]:
        token = {
            "admin": self.admin_token,
            "member": self.member_token,
            "finance": self.finance_token,
        }[role]
        return {"Authorization": f"Bearer {token}"}


async def make_tenant(
    app: Any, slug: str, password: str | None = "correct-horse-battery"
) -> Tenant:
    """A workspace with an admin, a member and a finance user, all with the same password."""
    runtime: Runtime = app.state.runtime
    async with runtime.sessions() as session:
        workspace = await workspaces.create_workspace(session, slug, slug.title())
        tokens = {}
        for role in ("admin", "member", "finance"):
            member = await workspaces.add_member(
                session, workspace, f"{role}@{slug}.example", role, password
            )
            tokens[role] = member.api_token
        await session.commit()
    return Tenant(slug, tokens["admin"], tokens["member"], tokens["finance"])


async def enroll(
    client: httpx.AsyncClient, tenant: Tenant, hostname: str = "vm", **issue: Any
) -> dict[str, Any]:
    issued = await client.post(
        f"/api/v1/workspaces/{tenant.slug}/enrollment-tokens", json=issue, headers=tenant.auth()
    )
    assert issued.status_code == 201, issued.text
    claimed = await client.post(
        "/agent/v1/enrollments/claim",
        json={
            "enrollmentToken": issued.json()["enrollmentToken"],
            "hostname": hostname,
            "agentVersion": "1.8.0",
        },
    )
    assert claimed.status_code == 201, claimed.text
    data: dict[str, Any] = claimed.json()
    return data


async def push(client: httpx.AsyncClient, agent_token: str, body: Any) -> httpx.Response:
    return await client.post(
        "/agent/v1/observations",
        json=body,
        headers={"Authorization": f"Bearer {agent_token}"},
    )


def minutes_ago(n: float) -> datetime:
    return datetime.now(UTC) - timedelta(minutes=n)


# For a body sent as raw bytes (hostile JSON) with the JSON media type.
JSON = {"Content-Type": "application/json"}


def spellings(uuid_text: str) -> list[str]:
    """An id in the other spellings uuid.UUID reads: upper case, braces, urn:, no hyphens."""
    return [
        uuid_text.upper(),
        "{" + uuid_text + "}",
        "urn:uuid:" + uuid_text,
        uuid_text.replace("-", ""),
    ]
