"""What a budget notice says in a mail subject, a Slack line and a mail's first line
(board/notices/messages.py prints it, on one line, escaped for Slack)."""

from __future__ import annotations

from typing import Any

BUDGET_HEADLINES = {
    "budget.warning": "Budget warning",
    "budget.exceeded": "Budget exceeded",
}


def percent(share: object) -> str | None:
    return f"{float(share) * 100:.0f} %" if isinstance(share, int | float) else None


def budget_headline(body: dict[str, Any]) -> str:
    """ "Acme: Budget warning for team vision, 2026-12: 62 % used, forecast 104 %"."""
    data = body.get("data", {})
    workspace = (data.get("workspace") or {}).get("name", "")
    words = BUDGET_HEADLINES.get(str(body.get("type")), str(body.get("type")))
    used, forecast = percent(data.get("usedShare")), percent(data.get("forecastShare"))
    if used is None:  # a budget of 0: no share, the figures themselves
        state = f"{data.get('usedGpuHours')} GPU-hours used of a budget of 0"
    else:
        state = f"{used} used" + (f", forecast {forecast}" if forecast else "")
    return f"{workspace}: {words} for team {data.get('team')}, {data.get('period')}: {state}"
