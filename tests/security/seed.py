"""Tenants, people, hosts and observations, made the way an operator and an agent make them.

Workspaces and their first admin come from the CLI (`create-workspace`, `create-user
--json --password-stdin`); everything else from the HTTP API, as admins and agents do it.
Every secret and password is remembered by the board object, so no later answer and no
log line may carry it.
"""

from __future__ import annotations

import copy
import json
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime, time, timedelta
from pathlib import Path
from typing import Any

from tests.board.test_archives import GPU_SAMPLE, PROC_SAMPLE, gz_csv
from tests.support.live import LiveBoard
from tests.support.replies import Reply

_HERE = Path(__file__).resolve().parent
_EXAMPLE = "observation-1.8.0-fake.json"
EXAMPLES = (
    _HERE.parents[2] / "shared" / "contract" / "examples",
    _HERE.parent / "board" / "examples",
)


def unique(base: str) -> str:
    return f"{base}-{secrets.token_hex(3)}"


def example_observation() -> dict[str, Any]:
    for folder in EXAMPLES:
        path = folder / _EXAMPLE
        if path.exists():
            data: dict[str, Any] = json.loads(path.read_text())
            return data
    raise FileNotFoundError(_EXAMPLE)


def observation(
    at: datetime | None = None,
    *,
    users: tuple[str, ...] = (),
    process_names: tuple[str, ...] = (),
    gpu_names: tuple[str, ...] = (),
    gpu_uuids: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The 1.8.0 fake agent's push at `at` (now), with the names given.

    users / process_names: compute processes on GPU 0, one per name (padded with the
    other list's last entry); gpu_names: the cards' model names; gpu_uuids: replaces the
    cards by one per UUID (copies of card 0).
    """
    body = copy.deepcopy(example_observation())
    body["observedAt"] = (at or datetime.now(UTC)).isoformat()
    if gpu_uuids:
        template = body["gpus"][0]
        body["gpus"] = [
            {**copy.deepcopy(template), "uuid": uuid, "index": i}
            for i, uuid in enumerate(gpu_uuids)
        ]
    count = max(len(users), len(process_names))
    if count:
        body["gpus"][0]["processes"] = [
            {
                "pid": 20_000 + i,
                "linuxUser": users[min(i, len(users) - 1)] if users else "alice",
                "name": process_names[min(i, len(process_names) - 1)] if process_names else "py",
                "type": "compute",
                "memoryUsedMb": 1000,
            }
            for i in range(count)
        ]
        body["gpus"][0]["usageState"] = "active"
    for gpu, name in zip(body["gpus"], gpu_names, strict=False):
        gpu["name"] = name
    return body


@dataclass
class Person:
    email: str
    password: str = field(repr=False)
    token: str = field(repr=False)
    role: str = "member"


@dataclass
class Host:
    host_id: str
    token: str = field(repr=False)
    prefix: str
    display_name: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@dataclass
class Tenant:
    slug: str
    admin: Person
    member: Person
    finance: Person
    hosts: list[Host] = field(default_factory=list)

    def person(self, role: str) -> Person:
        found: Person = getattr(self, role)
        return found

    @property
    def people(self) -> list[Person]:
        return [self.admin, self.member, self.finance]


def new_password(board: LiveBoard) -> str:
    password = f"pw-{secrets.token_urlsafe(15)}"
    board.remember_password(password)
    return password


def add_member(
    board: LiveBoard, slug: str, admin_token: str, email: str, role: str, password: str | None
) -> Reply:
    body: dict[str, Any] = {"email": email, "role": role}
    if password is not None:
        body["password"] = password
    with board.client(admin_token) as c:
        reply = board.call(c, "POST", f"/api/v1/workspaces/{slug}/members", json=body)
    if reply.status_code == 201:
        board.remember(reply.json()["apiToken"])
    return reply


def make_tenant(board: LiveBoard, base: str) -> Tenant:
    """A workspace with an admin (from the CLI), a member and a finance user (REST)."""
    slug = unique(base)
    board.cli("create-workspace", slug, "--name", slug.title())
    people: dict[str, Person] = {}
    for role in ("admin", "member", "finance"):
        email = f"{role}@{slug}.example"
        password = new_password(board)
        if role == "admin":
            made = board.cli_json(
                "create-user",
                email,
                "--workspace",
                slug,
                "--role",
                "admin",
                "--password-stdin",
                stdin=password + "\n",
            )
            token = str(made["apiToken"])
        else:
            reply = add_member(board, slug, people["admin"].token, email, role, password)
            assert reply.status_code == 201, reply
            token = reply.json()["apiToken"]
        people[role] = Person(email, password, token, role)
    return Tenant(slug, people["admin"], people["member"], people["finance"])


def issue_enrollment(board: LiveBoard, tenant: Tenant, display_name: str | None = None) -> str:
    body = {"displayName": display_name} if display_name else {}
    with board.client(tenant.admin.token) as c:
        reply = board.call(
            c, "POST", f"/api/v1/workspaces/{tenant.slug}/enrollment-tokens", json=body
        )
    assert reply.status_code == 201, reply
    token = str(reply.json()["enrollmentToken"])
    board.remember(token)
    return token


def claim(board: LiveBoard, enrollment_token: str, hostname: str) -> Host:
    with board.client() as c:
        reply = board.call(
            c,
            "POST",
            "/agent/v1/enrollments/claim",
            json={
                "enrollmentToken": enrollment_token,
                "hostname": hostname,
                "agentVersion": "1.8.0",
            },
        )
    assert reply.status_code == 201, reply
    body = reply.json()
    board.remember(body["agentToken"])
    return Host(body["hostId"], body["agentToken"], body["tokenPrefix"], body["displayName"])


def enroll(board: LiveBoard, tenant: Tenant, hostname: str, *, via_cli: bool = False) -> Host:
    if via_cli:
        issued = board.cli_json("issue-token", "--workspace", tenant.slug)
        token = str(issued["enrollmentToken"])
    else:
        token = issue_enrollment(board, tenant)
    host = claim(board, token, hostname)
    tenant.hosts.append(host)
    return host


def push(board: LiveBoard, host: Host, body: dict[str, Any] | bytes, **kw: Any) -> Reply:
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json", **kw.pop("headers", {})}
    with board.client(host.token) as c:
        return board.call(
            c, "POST", "/agent/v1/observations", content=content, headers=headers, **kw
        )


def push_history(board: LiveBoard, host: Host, **names: Any) -> None:
    """Two pushes a minute apart: the minute between them is credited to the rollups."""
    now = datetime.now(UTC)
    for at in (now - timedelta(seconds=60), now):
        reply = push(board, host, observation(at, **names))
        assert reply.status_code == 202, reply


def yesterday() -> datetime:
    return datetime.combine(datetime.now(UTC).date() - timedelta(days=1), time(), UTC)


def upload_archive(board: LiveBoard, host: Host, table: str, day: str, body: bytes) -> Reply:
    with board.client(host.token) as c:
        return board.call(
            c,
            "POST",
            f"/agent/v1/archives?date={day}&table={table}",
            content=body,
            headers={"Content-Type": "application/gzip"},
        )


def day_archives(linux_user: str, process_name: str) -> tuple[bytes, bytes]:
    """Yesterday's gpu_sample and proc_sample: ten ticks of one busy card."""
    start = yesterday() + timedelta(hours=3)
    gpu_rows, proc_rows = [], []
    for i in range(10):
        ts = (start + timedelta(seconds=30 * i)).isoformat()
        gpu_rows.append([ts, "GPU-0", 90, 1, "active", 0, 1000, 50, 100])
        proc_rows.append(
            [ts, "GPU-0", 4242, 900, linux_user, "root", 1, 0, process_name, "compute"]
        )
    return gz_csv(GPU_SAMPLE, gpu_rows), gz_csv(PROC_SAMPLE, proc_rows)
