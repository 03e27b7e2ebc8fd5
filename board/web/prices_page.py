"""What the prices page shows: each price as a row with its state, and those in force."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from board.money.corrections import CorrectionWindow
from board.money.schemas import PricesOut
from board.reportkit.params import parse_zone

LOCAL = "%Y-%m-%d %H:%M"


@dataclass(frozen=True)
class PriceRow:
    gpu_model: str
    from_: str
    until: str | None
    amount: str
    # "upcoming" (not begun), "open" (begun, its window open) or "fixed".
    state: str
    # When it stops being correctable, in the workspace's zone.
    correctable_until: str


@dataclass(frozen=True)
class PricesView:
    currency: str | None
    # The currency may still change: no price is in force yet.
    currency_open: bool
    timezone: str
    today: str
    correction_days: int
    earliest_day: str
    rows: list[PriceRow]
    in_force: list[PriceRow]


def amount_text(value: float, minor_units: int | None) -> str:
    """A price with at least the currency's digits and at most its own six ("0.80")."""
    exact = Decimal(f"{value:.6f}").normalize()
    shown = f"{exact:f}"
    digits = len(shown.partition(".")[2])
    return f"{exact:.{max(digits, minor_units or 0)}f}"


def prices_view(out: PricesOut, window: CorrectionWindow) -> PricesView:
    _, zone = parse_zone(out.timezone)
    now = datetime.now(UTC)
    rows: list[PriceRow] = []
    current: dict[str, PriceRow] = {}
    for price in out.prices:
        if price.starts_at > now:
            state = "upcoming"
        else:
            state = "fixed" if price.fixed else "open"
        row = PriceRow(
            gpu_model=price.gpu_model,
            from_=price.from_.isoformat(),
            until=price.until.isoformat() if price.until else None,
            amount=amount_text(price.per_gpu_hour, out.minor_units),
            state=state,
            correctable_until=price.correctable_until.astimezone(zone).strftime(LOCAL),
        )
        rows.append(row)
        if price.starts_at <= now:
            current[price.gpu_model] = row  # the rows of a model come oldest first
    earliest = window.earliest_day(now, zone)
    return PricesView(
        currency=out.currency,
        currency_open=out.currency is None or not current,
        timezone=out.timezone,
        today=out.today.isoformat(),
        correction_days=out.correction_days,
        earliest_day=earliest.isoformat(),
        rows=rows,
        in_force=list(current.values()),
    )
