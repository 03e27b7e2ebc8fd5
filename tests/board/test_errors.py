"""One sentence per refused input: a value refused by a pattern is told what it lacks."""

from __future__ import annotations

from typing import Any

from board.app import create_app
from board.errors import _PATTERN_SENTENCES, describe_validation_errors
from board.settings import Settings


def _patterns(node: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        if isinstance(node.get("pattern"), str):
            found.add(node["pattern"])
        for value in node.values():
            found |= _patterns(value)
    elif isinstance(node, list):
        for value in node:
            found |= _patterns(value)
    return found


def test_every_pattern_of_the_api_has_its_own_sentence() -> None:
    """A pattern with no sentence would answer in pydantic's words, quoting the regex;
    before, every pattern was answered "must not contain NUL" whatever it refused."""
    app = create_app(Settings(database_url="postgresql://unused@127.0.0.1/unused"))
    patterns = _patterns(app.openapi())
    assert patterns, "the API declares no pattern: this test no longer looks where it should"
    unexplained = sorted(p for p in patterns if p not in _PATTERN_SENTENCES)
    assert not unexplained, (
        f"patterns without a sentence (board.errors.explained_pattern): {unexplained}"
    )


def test_an_unregistered_pattern_keeps_pydantics_words() -> None:
    error = {
        "type": "string_pattern_mismatch",
        "loc": ("body", "code"),
        "msg": "String should match pattern '^[a-z]+$'",
        "ctx": {"pattern": "^[a-z]+$"},
    }
    assert describe_validation_errors([error]) == "code: String should match pattern '^[a-z]+$'"


def test_errors_taken_without_their_context_are_explained_too() -> None:
    """The ingest drops pydantic's ctx (it may quote input): the message still names it."""
    error = {
        "type": "string_pattern_mismatch",
        "loc": ("gpus", 0, "name"),
        "msg": "String should match pattern '^[^\\x00]*$'",
    }
    assert describe_validation_errors([error]) == (
        "gpus.0.name: must not contain NUL (\\u0000) characters"
    )
