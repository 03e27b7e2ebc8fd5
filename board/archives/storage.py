"""Where archive objects live: a small interface, a local-filesystem store, a config hook.

The database indexes what is stored (board.archives.models); the store only keeps
bytes under a key. Any object store with put/get/delete by key fits, e.g. an
S3-compatible bucket: set GUA_BOARD_ARCHIVE_STORE=package.module:factory, where
factory(settings) returns an ArchiveStore. One that can also `open` an object as a
seekable file lets the back-fill stream it instead of holding it in memory whole.
"""

from __future__ import annotations

import asyncio
import importlib
import io
import os
import secrets
import shutil
from pathlib import Path
from typing import BinaryIO, Protocol, runtime_checkable

from board.settings import Settings

COPY_BLOCK_BYTES = 1024 * 1024


@runtime_checkable
class ArchiveStore(Protocol):
    async def put(self, key: str, data: bytes) -> None:
        """Store data under key, replacing what was there; readers see old or new, whole."""

    async def get(self, key: str) -> bytes:
        """The bytes under key; FileNotFoundError when there are none."""

    async def delete(self, key: str) -> None:
        """Remove key; a missing key is not an error."""


@runtime_checkable
class OpenableStore(Protocol):
    """A store that can also hand out an object as a seekable file (read as a stream)."""

    async def open(self, key: str) -> BinaryIO:
        """A binary file of the object, positioned at its start; FileNotFoundError if none."""


@runtime_checkable
class FileStore(Protocol):
    """A store that can take an object from a file (copied as a stream, never whole)."""

    async def put_file(self, key: str, source: BinaryIO) -> None:
        """Store the rest of `source` under key, as `put` stores bytes."""


async def put_object(store: ArchiveStore, key: str, source: BinaryIO) -> None:
    """Store a file's contents: streamed where the store can, else as its bytes."""
    if isinstance(store, FileStore):
        await store.put_file(key, source)
    else:
        await store.put(key, source.read())


async def open_object(store: ArchiveStore, key: str) -> BinaryIO:
    """An object to read as a stream: the store's own file where it has one, else its bytes.

    The caller closes it. A local store's open file keeps reading the object it opened,
    even if an upload replaces it or a prune deletes it meanwhile.
    """
    if isinstance(store, OpenableStore):
        return await store.open(key)
    return io.BytesIO(await store.get(key))


class LocalArchiveStore:
    """Objects as files under one directory; writes go through a temp file and a rename."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if not path.is_relative_to(self.root.resolve()) or ".." in Path(key).parts:
            raise ValueError(f"archive key {key!r} leaves the archive directory")
        return path

    async def put(self, key: str, data: bytes) -> None:
        await asyncio.to_thread(self._put, self._path(key), data)

    @staticmethod
    def _put(path: Path, data: bytes | BinaryIO) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            with tmp.open("wb") as out:
                if isinstance(data, bytes):
                    out.write(data)
                else:
                    shutil.copyfileobj(data, out, COPY_BLOCK_BYTES)
                out.flush()
                os.fsync(out.fileno())
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)

    async def put_file(self, key: str, source: BinaryIO) -> None:
        await asyncio.to_thread(self._put, self._path(key), source)

    async def get(self, key: str) -> bytes:
        return await asyncio.to_thread(self._path(key).read_bytes)

    async def open(self, key: str) -> BinaryIO:
        return await asyncio.to_thread(self._path(key).open, "rb")

    async def delete(self, key: str) -> None:
        await asyncio.to_thread(self._path(key).unlink, missing_ok=True)


def make_store(settings: Settings) -> ArchiveStore:
    """The store the settings name: "local", or a "module:factory" import path."""
    if settings.archive_store == "local":
        root = settings.archive_dir or settings.data_dir / "archives"
        return LocalArchiveStore(root)
    module_name, _, attr = settings.archive_store.partition(":")
    if not module_name or not attr:
        raise ValueError(
            "GUA_BOARD_ARCHIVE_STORE must be 'local' or 'package.module:factory', "
            f"not {settings.archive_store!r}"
        )
    factory = getattr(importlib.import_module(module_name), attr)
    store = factory(settings)
    if not isinstance(store, ArchiveStore):
        raise TypeError(f"{settings.archive_store} did not return an ArchiveStore")
    return store


def object_key(workspace_id: int, host_id: int, table: str, day: str) -> str:
    return f"w{workspace_id}/h{host_id}/{table}/{day}.csv.gz"
