"""PostgreSQL array literals built with str.join, for `%s::bigint[]`-style parameters.

The ingest path binds tens of thousands of values a second. psycopg's dumpers make a
Python call per value and per array element; these helpers format a whole column with
one join over C-level str() calls, and PostgreSQL parses the literal itself.
"""

from __future__ import annotations

from collections.abc import Iterable


def int_array(values: Iterable[int]) -> str:
    """`{1,2,3}`: an array literal of integers."""
    return "{" + ",".join(map(str, values)) + "}"


def nullable_int_array(values: Iterable[int | None]) -> str:
    return "{" + ",".join("NULL" if v is None else str(v) for v in values) + "}"


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def text_array(values: Iterable[str]) -> str:
    """`{"a","b"}`: an array literal of strings, each quoted (so `NULL` stays a string)."""
    return "{" + ",".join(map(_quoted, values)) + "}"


def nullable_text_array(values: Iterable[str | None]) -> str:
    return "{" + ",".join("NULL" if v is None else _quoted(v) for v in values) + "}"
