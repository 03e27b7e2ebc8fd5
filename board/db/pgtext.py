"""Array parameters for the ingest path's `%s::bigint[]`-style placeholders.

The ingest path binds tens of thousands of values a second. psycopg's dumpers make a
Python call per value and per array element; these helpers format a whole column at
once. `bigint_array` packs a column of integers in PostgreSQL's binary array format with
one struct.pack (C), which PostgreSQL reads without parsing text: half the Python and
half the PostgreSQL time of the text literal for a rollup upsert's columns
(docs/benchmarks.md, "Binary bigint arrays"). The text literals (one join over C-level
str() calls) remain for arrays nested in other arrays' text and for strings.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from psycopg import adapters
from psycopg.adapt import Buffer, Dumper
from psycopg.pq import Format

# The binary array header: dimensions, has-nulls flag, element type (int8), then the
# one dimension's length and lower bound; each element is its length (8) and value.
_INT8_OID = 20
_INT8_ARRAY_OID = 1016


class BigintArray:
    """A bigint[] parameter, packed once; values must fit in 64 bits (struct.error)."""

    __slots__ = ("packed",)

    def __init__(self, values: Iterable[int]) -> None:
        column = list(values)
        count = len(column)
        if not count:  # an empty array has no dimensions
            self.packed = struct.pack(">iii", 0, 0, _INT8_OID)
            return
        items = [8] * (2 * count)
        items[1::2] = column
        self.packed = struct.pack(f">iiiii{'iq' * count}", 1, 0, _INT8_OID, count, 1, *items)


class _BigintArrayDumper(Dumper):
    format = Format.BINARY
    oid = _INT8_ARRAY_OID

    def dump(self, obj: BigintArray) -> Buffer:
        return obj.packed


# On the global map, so every connection made after this import knows the type.
adapters.register_dumper(BigintArray, _BigintArrayDumper)


def bigint_array(values: Iterable[int]) -> BigintArray:
    """A column of integers as a binary bigint[] parameter (for `%s::bigint[]`)."""
    return BigintArray(values)


def int_array(values: Iterable[int]) -> str:
    """`{1,2,3}`: an array literal of integers."""
    return "{" + ",".join(map(str, values)) + "}"


def nullable_int_array(values: Iterable[int | None]) -> str:
    return "{" + ",".join("NULL" if v is None else str(v) for v in values) + "}"


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def text_array(values: Iterable[str]) -> str:
    """`{"a","b"}`: an array literal of strings, each quoted (so `NULL` stays a string).

    A column repeats a handful of values (users, process names, one timestamp per
    observation), so each distinct value is quoted once.
    """
    column = list(values)
    quoted = {v: _quoted(v) for v in set(column)}
    return "{" + ",".join(map(quoted.__getitem__, column)) + "}"


def nullable_text_array(values: Iterable[str | None]) -> str:
    column = list(values)
    quoted: dict[str | None, str] = {v: _quoted(v) for v in set(column) if v is not None}
    quoted[None] = "NULL"
    return "{" + ",".join(map(quoted.__getitem__, column)) + "}"
