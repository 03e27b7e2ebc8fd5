"""Array literals built with str.join read back exactly as the values they came from."""

from __future__ import annotations

import psycopg

from board.db.pgtext import int_array, nullable_int_array, nullable_text_array, text_array

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
