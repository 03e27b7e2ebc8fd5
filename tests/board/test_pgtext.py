"""Array parameters (literals built with str.join, binary bigint arrays) read back exactly
as the values they came from."""

from __future__ import annotations

import struct

import psycopg
import pytest

from board.db.pgtext import (
    bigint_array,
    int_array,
    nullable_int_array,
    nullable_text_array,
    text_array,
)

STRINGS = [
    "",
    "NULL",
    "null",
    'say "hi"',
    "back\\slash",
    "a,b",
    "{braces}",
    " leading and trailing ",
    "tab\tnew\nline\r",
    "naïve 名前 🚀",
    "alice",
    "alice",  # repeated values are quoted once and still all there
]


def test_literals_round_trip(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT %s::text[], %s::text[], %s::bigint[], %s::bigint[], %s::bigint[]",
            [
                text_array(STRINGS),
                nullable_text_array([None, *STRINGS, None]),
                int_array([0, -1, 2**62]),
                nullable_int_array([None, 7, None]),
                int_array([]),
            ],
        ).fetchone()
    assert row == (STRINGS, [None, *STRINGS, None], [0, -1, 2**62], [None, 7, None], [])


def test_binary_bigint_arrays_round_trip(database_url: str) -> None:
    """Packed in PostgreSQL's binary format: the extremes of bigint, an empty column, a
    generator; side by side in unnest, as the upserts read them."""
    extremes = [0, -1, 1, -(2**63), 2**63 - 1, 86_400_000_000]
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT %s::bigint[], %s::bigint[], %s::bigint[]",
            [bigint_array(extremes), bigint_array([]), bigint_array(i * 3 for i in range(4))],
        ).fetchone()
        pairs = conn.execute(
            "SELECT * FROM unnest(%s::bigint[], %s::bigint[])",
            [bigint_array([1, 2]), bigint_array([30, 40])],
        ).fetchall()
    assert row == (extremes, [], [0, 3, 6, 9])
    assert pairs == [(1, 30), (2, 40)]


def test_a_value_past_bigint_is_refused_before_it_is_sent() -> None:
    with pytest.raises(struct.error):
        bigint_array([2**63])
