"""PostgreSQL's text formats built with str.join: COPY lines and array literals.

The ingest path formats tens of thousands of values a second. psycopg's dumpers make
a Python call per value (and per array element); these helpers format a whole column
or row with one join over C-level str() calls, and PostgreSQL parses the text itself.
Only ints and strs go in: every caller formats its own timestamps and nulls.
"""

from __future__ import annotations

from collections.abc import Iterable

# COPY's text format: a backslash starts an escape; tab, newline and CR delimit.
COPY_NULL = "\\N"
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def copy_text(value: str) -> str:
    """A string as one field of a COPY text line."""
    return value.translate(_COPY_ESCAPES)


def copy_int(value: int | None) -> str:
    return COPY_NULL if value is None else str(value)


def int_array(values: Iterable[int]) -> str:
    """`{1,2,3}`: an array literal of integers, for a `%s::bigint[]` parameter."""
    return "{" + ",".join(map(str, values)) + "}"


def _quoted(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def text_array(values: Iterable[str]) -> str:
    """`{"a","b"}`: an array literal of strings, each quoted (so `NULL` stays a string)."""
    return "{" + ",".join(map(_quoted, values)) + "}"
