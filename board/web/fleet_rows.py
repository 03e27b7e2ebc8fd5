"""The dense view's GPU rows as HTML, built in Python: 2,400 rows through a Jinja2 loop
and a macro per row cost ~60 ms a page; these strings cost a few.

The markup is exactly what `_fleet_rows.html` drew before (tests compare the two).
Every value that comes from an agent or a person (host and GPU names, GPU uuids,
Linux users) goes through markupsafe.escape; the rest are numbers or the board's own
words, escaped all the same where they are text.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache

from markupsafe import Markup, escape

from board.web.fleet import Card
from board.web.render import gib, templates

# Between two rows, as the template's loop wrote it.
_ROW_END = "</tr>\n    "


@cache
def _labels() -> tuple[dict[str, str], dict[str, str]]:
    """State and booked-availability labels, from where the templates take them (one source)."""
    states: dict[str, str] = templates.env.globals["state_labels"]  # type: ignore[assignment]
    module = templates.get_template("_reservation_availability.html").module
    available: dict[str, str] = module.availability_labels  # type: ignore[attr-defined]
    return states, available


def _text(value: str) -> str:
    """markupsafe.escape, without its call for text with nothing to escape (nearly all:
    2,400 rows hold ~20,000 values, and the call costs more than the row's other work)."""
    if "<" in value or ">" in value or "&" in value or '"' in value or "'" in value:
        return str(escape(value))
    return value


def gpu_row(card: Card, with_host: bool) -> str:
    """One `<tr>` of the dense view, every value escaped (gpu_rows marks them safe)."""
    states, available = _labels()
    state = _text(card.state)
    uuid = _text(card.uuid)
    since = (
        f'<span data-since="{card.state_since.isoformat()}">{_text(card.state_for)}</span>'
        if card.state_since
        else ""
    )
    if card.holders is None:
        held = f"{card.process_count} proc."
    else:
        held = ", ".join([_text(user) for user in card.holders])
    util = "–" if card.util_pct is None else f"{card.util_pct} %"
    host = f"<td>{_text(card.host_name)}</td>" if with_host else ""
    label = available.get(card.availability)
    # A chip only for a booked GPU, as the card draws it (_reservation_availability.html).
    chip = (
        f' <span class="avail avail-{_text(card.availability)}">{_text(label)}</span>'
        if label
        else ""
    )
    return (
        f'<tr class="state-{state}" data-gpu="{_text(card.host_id)}/{uuid}">{host}'
        f"<td>{card.index}</td>"
        f'<td><span class="badge state-{state}">{_text(states[card.state])}</span>{chip}</td>'
        f"<td>{since}</td>"
        f"<td>{held}</td>"
        f'<td class="num">{util}</td>'
        f'<td class="num">{gib(card.memory_used_mb)}/{gib(card.memory_total_mb)}</td>'
        f'<td class="model">{_text(card.name)}</td>'
    )


def gpu_rows(cards: Iterable[Card], with_host: bool) -> Markup:
    """The rows of one host's (or group's) `<tbody>`."""
    return Markup("".join([gpu_row(c, with_host) + _ROW_END for c in cards]))
