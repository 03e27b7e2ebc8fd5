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
