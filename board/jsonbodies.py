"""JSON bodies refused before they are validated: an object wider than any the board reads.

Every input model forbids unknown keys, and pydantic makes one error per unknown key, each
about a kilobyte: a 1 MiB push of 80,000 unknown keys cost a worker ~95 MiB and 0.3 s to
refuse, and the same body on an API route 1.3 s and a 5.2 MB answer listing every key. No
object the board reads has more than a few dozen keys (none is a map of the sender's
choosing), so a body with an object of more than `MAX_KEYS_PER_OBJECT` keys is refused
first. Ordinary bodies pay one `bytes.count`: a body with few colons has few keys.

The agent routes read their bodies by hand and check them where they parse them; every
API route gets `refuse_wide_json_bodies` as an app-wide dependency, which FastAPI runs
after it has read the body and before it validates it.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import HTTPConnection, Request

from board.errors import Unprocessable

# The widest input model has 15 fields.
MAX_KEYS_PER_OBJECT = 64
# At most this many colons: at most this many keys, so at most this many errors (~6 MiB
# at worst), and no need to parse the body twice. A push of 8 GPUs × 2 processes has
# about 170 colons; only pushes of some 800 processes or more are scanned (~0.5 ms for
# 64 GPUs × 16 processes).
SCAN_ABOVE_COLONS = 5_000

TOO_WIDE_DETAIL = (
    f"The JSON body has an object with more than {MAX_KEYS_PER_OBJECT} keys; "
    "no request the board takes has one."
)


class _TooWide(Exception):
    pass


def _refuse_wide(pairs: list[tuple[str, Any]]) -> None:
    if len(pairs) > MAX_KEYS_PER_OBJECT:
        raise _TooWide
    # Nothing is kept: the parse only measures.


def has_too_wide_object(body: bytes) -> bool:
    """Whether some object of this JSON body has more than MAX_KEYS_PER_OBJECT keys.

    A body that is not JSON (or nests past Python's recursion limit) is not this check's
    to refuse: the validator that follows says what is wrong with it."""
    if body.count(b":") <= SCAN_ABOVE_COLONS:
        return False
    try:
        json.loads(body, object_pairs_hook=_refuse_wide)
    except _TooWide:
        return True
    except (ValueError, RecursionError):
        return False
    return False


_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


async def refuse_wide_json_bodies(connection: HTTPConnection) -> None:
    """422 for a JSON body with a too-wide object, on the API's routes (whose bodies the
    request guard bounds; the agent routes check their own, pages post forms). Typed as
    a connection: an app-wide dependency also runs for the WebSocket routes."""
    request = connection
    if not isinstance(request, Request) or request.method not in _BODY_METHODS:
        return
    if not request.url.path.startswith("/api/"):
        return
    media = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media and media != "application/json" and not media.endswith("+json"):
        return  # FastAPI parses JSON bodies only (or bodies sent without a type)
    if has_too_wide_object(await request.body()):
        raise Unprocessable(TOO_WIDE_DETAIL)
