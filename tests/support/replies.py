"""Answers of a live board as the tests read them: capped bodies that can name their worker,
the string `detail` every refusal carries, and the shape of a token secret."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import httpx

# A whole bearer secret: kind, 8 hex public id, "_", 256 random bits (url-safe base64).
SECRET = re.compile(r"gua_[a-z]+_[0-9a-f]{8}_[A-Za-z0-9_-]{30,}")  # agent, pat, enroll, cal
_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_of(html: str) -> str:
    found = _CSRF.search(html)
    assert found, f"no CSRF token in the page: {html[:300]!r}"
    return found.group(1)


@dataclass
class Reply:
    """An answer as read: status, headers, up to a cap of the body, and its worker."""

    status_code: int
    headers: httpx.Headers
    content: bytes
    complete: bool
    worker: int | None
    url: str

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)

    def detail(self) -> str:
        """The JSON string `detail` every refusal carries (asserted, not assumed)."""
        try:
            body = self.json()
        except ValueError:
            raise AssertionError(f"{self.status_code} is not JSON: {self.text[:300]!r}") from None
        assert isinstance(body, dict), body
        assert isinstance(body.get("detail"), str), f"no string detail: {body}"
        return str(body["detail"])

    def __repr__(self) -> str:
        shown = SECRET.sub(lambda m: m.group(0)[:18] + "…", self.text[:400])
        return f"<Reply {self.status_code} {self.url} {shown!r}>"


# A refusal: one of the statuses, with a string detail (returned).
def refused(reply: Reply, *statuses: int) -> str:
    assert reply.status_code in statuses, reply
    return reply.detail()
