"""A fleet on a live board for the operations tests: a workspace made through the CLI, its
admin's API token, hosts enrolled and pushing, and the board's /metrics read."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from tests.support.live import LiveBoard

EXAMPLE = Path(__file__).resolve().parents[1] / "board" / "examples" / "observation-1.8.0-fake.json"


@dataclass
class Fleet:
    """A workspace made through the CLI, its admin's API token, and enrolled hosts."""

    slug: str
    admin_token: str
    email: str
    password: str

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.admin_token}"}


def make_fleet(board: LiveBoard, slug: str) -> Fleet:
    board.cli("create-workspace", slug)
    password = secrets.token_urlsafe(18)
    email = f"admin@{slug}.example"
    made = json.loads(
        board.cli(
            "create-user",
            email,
            "--workspace",
            slug,
            "--role",
            "admin",
            "--password-stdin",
            "--json",
            stdin=password + "\n",
        )
    )
    return Fleet(slug, made["apiToken"], email, password)


def enroll(board: LiveBoard, fleet: Fleet, hostname: str) -> dict[str, Any]:
    with board.client() as c:
        issued = c.post(
            f"/api/v1/workspaces/{fleet.slug}/enrollment-tokens", json={}, headers=fleet.auth()
        )
        assert issued.status_code == 201, issued.text
        claimed = c.post(
            "/agent/v1/enrollments/claim",
            json={
                "enrollmentToken": issued.json()["enrollmentToken"],
                "hostname": hostname,
                "agentVersion": "1.8.0",
            },
        )
    assert claimed.status_code == 201, claimed.text
    host: dict[str, Any] = claimed.json()
    return host


def observation(at: datetime | None = None) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(EXAMPLE.read_text())
    body["observedAt"] = (at or datetime.now(UTC)).isoformat()
    return body


def push(board: LiveBoard, agent_token: str, body: Any) -> httpx.Response:
    with board.client() as c:
        return c.post(
            "/agent/v1/observations",
            json=body,
            headers={"Authorization": f"Bearer {agent_token}"},
        )


def sample_value(text: str, name: str, labels: str = "") -> float:
    """One sample of a Prometheus text page (0 when absent), e.g. name_total{reason="x"}."""
    wanted = f"{name}{{{labels}}}" if labels else name
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        if key == wanted:
            return float(value)
    return 0.0
