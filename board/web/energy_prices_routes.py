"""The electricity prices and carbon intensity page: every role reads the values (as
the API's GET), admins add a value or replace the one of the same date with a form.

A form sends one value; the page sends the whole list to the money service's
put_values with it in (the values that have not begun would otherwise be dropped), so
the rules are the API's: the correction window, the currency (docs/money.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Annotated, Any

from fastapi import APIRouter, Form, Request, Response
from pydantic import ValidationError

from board.db.deps import SessionDep
from board.errors import DomainError, Unprocessable, describe_validation_errors
from board.money import energy_rates
from board.money.corrections import CorrectionWindow, PriceWindowDep
from board.money.energy_schemas import CarbonValueIn, EnergyPriceIn
from board.reportkit.params import parse_zone
from board.web.deps import AdminPageDep, CsrfDep, Page, PageDep
from board.web.forms import submit
from board.web.prices_page import LOCAL, amount_text
from board.web.render import PageRoute, redirect, render

router = APIRouter(prefix="/w/{slug}", route_class=PageRoute, include_in_schema=False)

NOTICES = {
    "price": "Electricity price saved. Energy costs use it from its start.",
    "carbon": "Carbon intensity saved. CO2e uses it from its start.",
}


@dataclass(frozen=True)
class ValueRow:
    from_: str
    until: str | None
    value: str
    # "upcoming" (not begun), "open" (begun, correctable) or "fixed".
    state: str
    correctable_until: str
    in_force: bool


@dataclass(frozen=True)
class ValueForm:
    """A form as it was sent (drawn again with a refusal)."""

    value: str = ""
    from_: str = ""


def _rows(values: list[Any], number: str, digits: int | None, zone_name: str) -> list[ValueRow]:
    _, zone = parse_zone(zone_name)
    now = datetime.now(UTC)
    begun = [v for v in values if v.starts_at <= now]
    current = begun[-1] if begun else None
    return [
        ValueRow(
            from_=v.from_.isoformat(),
            until=v.until.isoformat() if v.until else None,
            value=amount_text(getattr(v, number), digits),
            state="upcoming" if v.starts_at > now else "fixed" if v.fixed else "open",
            correctable_until=v.correctable_until.astimezone(zone).strftime(LOCAL),
            in_force=v is current,
        )
        for v in values
    ]


async def _page(
    request: Request,
    page: Page,
    db: SessionDep,
    window: CorrectionWindow,
    status_code: int = 200,
    error: str | None = None,
    forms: dict[str, ValueForm] | None = None,
) -> Response:
    prices = await energy_rates.energy_prices(db, page.ctx, window)
    carbon = await energy_rates.carbon_intensity(db, page.ctx, window)
    today = prices.today.isoformat()
    context: dict[str, Any] = {
        "page": page,
        "nav": "usage",
        "currency": prices.currency,
        "timezone": prices.timezone,
        "today": today,
        "correction_days": prices.correction_days,
        "prices": _rows(prices.prices, "per_kwh", prices.minor_units, prices.timezone),
        "carbon": _rows(carbon.values, "grams_per_kwh", 0, carbon.timezone),
        "notice": NOTICES.get(request.query_params.get("notice", "")),
        "error": error,
        "forms": {"price": ValueForm(from_=today), "carbon": ValueForm(from_=today)}
        | (forms or {}),
    }
    return render(request, "energy_prices.html", context, status_code=status_code)


@router.get("/energy-prices")
async def energy_prices_page(
    request: Request, page: PageDep, db: SessionDep, window: PriceWindowDep
) -> Response:
    return await _page(request, page, db, window)


def _entry(model: type[EnergyPriceIn] | type[CarbonValueIn], body: dict[str, str]) -> Any:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise Unprocessable(describe_validation_errors(exc.errors())) from None


def _with(old: list[tuple[date, Decimal]], day: date, value: Decimal) -> list[tuple[date, Decimal]]:
    """The whole list with `value` from `day` added, or replacing that day's."""
    return sorted([(d, v) for d, v in old if d != day] + [(day, value)])


async def _save(
    request: Request,
    page: Page,
    db: SessionDep,
    window: CorrectionWindow,
    kind: str,
    form: ValueForm,
) -> Response:
    async def save() -> Response:
        if kind == "price":
            sent = _entry(EnergyPriceIn, {"perKWh": form.value.strip(), "from": form.from_.strip()})
            now = await energy_rates.energy_prices(db, page.ctx, window)
            old = [(p.from_, Decimal(repr(p.per_kwh))) for p in now.prices]
            entries = _with(old, sent.from_, sent.per_kwh)
            await energy_rates.put_values(db, page.ctx, energy_rates.ENERGY_PRICES, entries, window)
        else:
            sent = _entry(
                CarbonValueIn, {"gramsPerKWh": form.value.strip(), "from": form.from_.strip()}
            )
            now_c = await energy_rates.carbon_intensity(db, page.ctx, window)
            old = [(v.from_, Decimal(repr(v.grams_per_kwh))) for v in now_c.values]
            entries = _with(old, sent.from_, sent.grams_per_kwh)
            await energy_rates.put_values(
                db, page.ctx, energy_rates.CARBON_INTENSITY, entries, window
            )
        return redirect(request, f"/w/{page.slug}/energy-prices?notice={kind}#{kind}")

    async def again(exc: DomainError) -> Response:
        return await _page(request, page, db, window, exc.status_code, exc.detail, {kind: form})

    return await submit(db, page, save, again)


@router.post("/energy-prices")
async def save_energy_price(
    request: Request,
    _csrf: CsrfDep,
    page: AdminPageDep,
    db: SessionDep,
    window: PriceWindowDep,
    per_kwh: Annotated[str, Form(max_length=100)] = "",
    from_: Annotated[str, Form(alias="from", max_length=100)] = "",
) -> Response:
    """Add an electricity price, or replace the one from that date."""
    return await _save(request, page, db, window, "price", ValueForm(per_kwh, from_))


@router.post("/carbon-intensity")
async def save_carbon_intensity(
    request: Request,
    _csrf: CsrfDep,
    page: AdminPageDep,
    db: SessionDep,
    window: PriceWindowDep,
    grams_per_kwh: Annotated[str, Form(max_length=100)] = "",
    from_: Annotated[str, Form(alias="from", max_length=100)] = "",
) -> Response:
    """Add a carbon intensity, or replace the one from that date."""
    return await _save(request, page, db, window, "carbon", ValueForm(grams_per_kwh, from_))
