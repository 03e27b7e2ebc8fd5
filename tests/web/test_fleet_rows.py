"""The dense view's rows built in Python (board.web.fleet_rows) draw exactly what the
Jinja2 row did, and escape what agents and people send (names, users, GPU uuids)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

import pytest

from board.web.fleet import Card
from board.web.fleet_rows import gpu_row, gpu_rows
from board.web.render import templates

# The row as `_fleet_rows.html` drew it before the rows moved to Python, in the app's
# own environment (autoescape, filters, labels).
JINJA_ROW = templates.env.from_string(
    """{% from "_reservation_availability.html" import availability_badge %}"""
    """{% set by_host = not with_host %}"""
    """<tr class="state-{{ c.state }}" data-gpu="{{ c.host_id }}/{{ c.uuid }}">{% if not by_host %}<td>{{ c.host_name }}</td>{% endif %}<td>{{ c.index }}</td><td><span class="badge state-{{ c.state }}">{{ state_labels[c.state] }}</span>{% set chip = availability_badge(c) %}{% if chip %} {{ chip }}{% endif %}</td><td>{% if c.state_since %}<span data-since="{{ c.state_since.isoformat() }}">{{ c.state_for }}</span>{% endif %}</td><td>{% if c.holders is none %}{{ c.process_count }} proc.{% else %}{{ c.holders|join(', ') }}{% endif %}</td><td class="num">{{ c.util_pct if c.util_pct is not none else '–' }}{% if c.util_pct is not none %} %{% endif %}</td><td class="num">{{ c.memory_used_mb|gib }}/{{ c.memory_total_mb|gib }}</td><td class="model">{{ c.name }}</td>"""  # noqa: E501
)

HOSTILE = "<script>alert('x')</script> & \"q\""
AVAILABILITIES = [
    "free",
    "in_use",
    "reserved_in_use",
    "reserved_idle",
    "reserved_conflict",
    "not_observed",
]


def _card(**changes: object) -> Card:
    values: dict[str, object] = {
        "host_id": "4f3c2a9e-0000-4000-8000-000000000001",
        "uuid": "GPU-0000-2",
        "index": 2,
        "name": "NVIDIA H100 80GB HBM3",
        "state": "idle_held",
        "util_pct": 0,
        "memory_used_mb": 40000,
        "memory_total_mb": 81559,
        "temperature_c": 50,
        "power_w": 300,
        "holders": ("alice", "bob"),
        "process_count": 2,
        "host_name": "gpu-000",
        "state_since": datetime(2026, 12, 3, 9, 15, tzinfo=UTC),
        "state_for": "3 h 10 min",
        "availability": "in_use",
    }
    values.update(changes)
    return Card(**values)  # type: ignore[arg-type]


CASES = [
    _card(),
    _card(holders=None, process_count=3),
    _card(holders=(), state="idle", state_since=None, state_for=""),
    _card(util_pct=None, memory_used_mb=None, memory_total_mb=None, state="not_observed"),
    _card(state="active", util_pct=97),
    _card(name=HOSTILE, uuid=HOSTILE, host_name=HOSTILE, holders=(HOSTILE, "b&b")),
    *[_card(availability=a) for a in AVAILABILITIES],
]


@pytest.mark.parametrize(("card", "with_host"), list(itertools.product(CASES, [False, True])))
def test_row_is_the_jinja_row(card: Card, with_host: bool) -> None:
    assert gpu_row(card, with_host) == JINJA_ROW.render(c=card, with_host=with_host)


def test_hostile_values_are_escaped() -> None:
    card = _card(name=HOSTILE, uuid=HOSTILE, host_name=HOSTILE, holders=(HOSTILE,))
    html = str(gpu_rows([card], with_host=True))
    assert "<script>" not in html
    assert html.count("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &#34;q&#34;") == 4
    assert 'data-gpu="4f3c2a9e-0000-4000-8000-000000000001/&lt;script&gt;' in html


GPU_CARD = templates.env.from_string(
    """{% from "macros.html" import gpu_card %}{{ gpu_card(c) }}"""
)
BOOKED = {
    "reserved_in_use": "Reserved, in use",
    "reserved_idle": "Reserved, idle",
    "reserved_conflict": "Reserved, someone else on it",
}


@pytest.mark.parametrize("availability", AVAILABILITIES)
def test_only_a_booked_gpu_gets_an_availability_chip(availability: str) -> None:
    """ "Free" or "In use" beside "Idle" or "Active" said nothing new: the chip is for a
    booking in force; the card still carries the availability for scripts."""
    row = gpu_row(_card(availability=availability), with_host=False)
    card = GPU_CARD.render(c=_card(availability=availability))
    assert f'data-availability="{availability}"' in card
    for html in (row, card):
        if availability in BOOKED:
            assert f'<span class="avail avail-{availability}">{BOOKED[availability]}</span>' in html
        else:
            assert 'class="avail' not in html
