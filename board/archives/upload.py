"""An upload's body, spooled: at most a mebibyte in memory, the rest in a temporary file.

The body used to be read whole into memory, then joined (twice its size): 100 MiB that
were not even gzip grew a worker by 200 MiB before the refusal. Now the first bytes
decide whether it is gzip at all, and a body of any allowed size costs the worker about
`IN_MEMORY_BYTES` plus the check's buffers; the check and the store read the file.
"""

from __future__ import annotations

import tempfile
from typing import BinaryIO, cast

from starlette.requests import Request

from board.archives.csvfile import GZIP_MAGIC, NOT_GZIP
from board.errors import BadRequest, PayloadTooLarge

IN_MEMORY_BYTES = 1024 * 1024


def too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"The archive is larger than the limit of {limit} bytes (GUA_BOARD_ARCHIVE_MAX_BYTES)."
    )


async def spool_body(request: Request, limit: int) -> BinaryIO:
    """The body as a file at its start (the caller closes it), or a refusal as soon as
    the body shows it: over `limit` (by Content-Length or as it streams), or not gzip."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large(limit)
    spool = cast(BinaryIO, tempfile.SpooledTemporaryFile(max_size=IN_MEMORY_BYTES))  # noqa: SIM115
    try:
        size = 0
        head = b""
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise too_large(limit)
            if len(head) < len(GZIP_MAGIC):
                head += chunk[: len(GZIP_MAGIC) - len(head)]
                if not GZIP_MAGIC.startswith(head):
                    raise BadRequest(NOT_GZIP)
            spool.write(chunk)
        spool.seek(0)
        return spool
    except BaseException:
        spool.close()
        raise
