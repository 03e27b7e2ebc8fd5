"""Text contrast of the board's colours: every pair the pages draw is at least 4.5:1 (WCAG AA)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

CSS = Path(__file__).resolve().parents[2] / "board" / "web" / "static" / "board.css"
WHITE = "#ffffff"


def _variables() -> dict[str, str]:
    root = re.search(r":root\s*{(.*?)}", CSS.read_text(), re.S)
    assert root is not None
    return dict(re.findall(r"--([\w-]+):\s*(#[0-9a-fA-F]{6})", root.group(1)))


def _luminance(colour: str) -> float:
    def channel(hex2: str) -> float:
        c = int(hex2, 16) / 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(colour[i : i + 2]) for i in (1, 3, 5))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: str, b: str) -> float:
    la, lb = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


V = _variables()
CARD_BACKGROUNDS = ("panel", "bg", "active-bg", "idle-held-bg", "idle-bg", "unobserved-bg")
PAIRS = (
    # body text and muted text on every surface, GPU cards included
    *[(V["text"], V[bg], f"text on {bg}") for bg in CARD_BACKGROUNDS],
    *[(V["muted"], V[bg], f"muted on {bg}") for bg in CARD_BACKGROUNDS],
    (V["link"], V["panel"], "link"),
    (V["link"], V["bg"], "link on page"),
    (V["error"], V["panel"], "error codes"),
    (V["danger"], WHITE, "danger button"),
    # white text on every badge and primary button
    *[
        (WHITE, V[name], f"white on {name}")
        for name in ("active", "idle-held", "idle", "unobserved", "error", "never", "primary")
    ],
    # header, command box, notices, the idle-held highlight, chart ticks
    (WHITE, "#16202c", "header"),
    ("#dfe6ee", "#16202c", "header email"),
    (WHITE, "#2f4a6b", "current nav item"),
    ("#f1f5f9", "#16202c", "command"),
    ("#7d0e17", "#fde8ea", "alert"),
    ("#0f4d21", "#e5f3e8", "notice"),
    ("#7a3d00", "#ffe3bd", "idle-held share highlight"),
    (V["text"], "#fff7ea", "idle-held column"),
    (V["text"], "#fff8e6", "secret box"),
    ("#4d555e", WHITE, "chart ticks"),
    # the live heat-map's utilization bands (dark text on the light ones, white on the dark)
    *[(V["text"], V[band], f"text on {band}") for band in ("u0", "u1", "u2")],
    *[(WHITE, V[band], f"white on {band}") for band in ("u3", "u4")],
)


@pytest.mark.parametrize(("fg", "bg", "what"), PAIRS, ids=[p[2] for p in PAIRS])
def test_text_contrast_is_at_least_4_5(fg: str, bg: str, what: str) -> None:
    assert contrast(fg, bg) >= 4.5, f"{what}: {fg} on {bg} is {contrast(fg, bg):.2f}:1"


def test_every_literal_colour_pair_above_is_still_in_the_stylesheet() -> None:
    css = CSS.read_text().lower()
    for fg, bg, what in PAIRS:
        for colour in (fg, bg):
            if colour != WHITE and colour not in V.values():
                assert colour in css, f"{what}: {colour} is no longer used; update this test"
