"""GET/PUT …/prices, PUT/DELETE one price, GET/PUT …/energy-prices and
…/carbon-intensity (DELETE one of each), and GET …/reports/focus (docs/money.md)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from board.auth.deps import AdminDep, ReaderDep
from board.db.deps import SessionDep
from board.errors import answers
from board.money import energy_rates, price_edits, service
from board.money.corrections import PriceWindowDep
from board.money.energy_schemas import (
    CarbonIntensityIn,
    CarbonIntensityOut,
    EnergyPricesIn,
    EnergyPricesOut,
    value_day,
)
from board.money.focus import Account, prepare_focus
from board.money.schemas import PriceAmountIn, PricesIn, PricesOut, price_entry, price_key
from board.reportkit import params
from board.reportkit.slots import take_report_connection
from board.reportkit.streaming import ReportStreamResponse

router = APIRouter(prefix="/api/v1/workspaces/{slug}", tags=["money"])

Text = Annotated[str | None, Query()]
FOCUS_CSV: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/csv": {"schema": {"type": "string"}}}},
    429: {"description": "The workspace's reports are all running; see Retry-After."},
}


@router.get("/prices", response_model=PricesOut, summary="GPU-hour prices")
async def prices(ctx: ReaderDep, session: SessionDep, window: PriceWindowDep) -> PricesOut:
    return await service.prices(session, ctx, window)


_OUTSIDE_WINDOW = {409: "The change would touch a price past its correction window."}


@router.put(
    "/prices",
    response_model=PricesOut,
    summary="Replace the GPU-hour prices",
    responses=answers(409, meaning=_OUTSIDE_WINDOW),
)
async def put_prices(
    body: PricesIn, ctx: AdminDep, session: SessionDep, window: PriceWindowDep
) -> PricesOut:
    return await service.put_prices(session, ctx, body, window)


# The model is the last segment and may hold "/" (a GPU's name is the agent's free text).
ONE_PRICE = "/prices/{valid_from}/{gpu_model:path}"


@router.put(
    ONE_PRICE,
    response_model=PricesOut,
    summary="Add one price, or correct it within its window",
    responses=answers(409, meaning=_OUTSIDE_WINDOW),
)
async def put_price(
    valid_from: str,
    gpu_model: str,
    body: PriceAmountIn,
    ctx: AdminDep,
    session: SessionDep,
    window: PriceWindowDep,
) -> PricesOut:
    """Add one price, or correct its amount within the correction window (docs/money.md)."""
    entry = price_entry(gpu_model, valid_from, body.per_gpu_hour)
    return await price_edits.set_price(session, ctx, entry, window)


@router.delete(
    ONE_PRICE,
    response_model=PricesOut,
    summary="Remove one price within its window",
    responses=answers(409, meaning=_OUTSIDE_WINDOW),
)
async def delete_price(
    valid_from: str, gpu_model: str, ctx: AdminDep, session: SessionDep, window: PriceWindowDep
) -> PricesOut:
    """Remove one price within the correction window; its hours fall to the price before."""
    key = price_key(gpu_model, valid_from)
    return await price_edits.remove_price(session, ctx, key.gpu_model, key.from_, window)


@router.get("/energy-prices", response_model=EnergyPricesOut, summary="Electricity prices")
async def energy_prices(
    ctx: ReaderDep, session: SessionDep, window: PriceWindowDep
) -> EnergyPricesOut:
    return await energy_rates.energy_prices(session, ctx, window)


@router.put(
    "/energy-prices",
    response_model=EnergyPricesOut,
    summary="Replace the electricity prices",
    responses=answers(409, meaning=_OUTSIDE_WINDOW),
)
async def put_energy_prices(
    body: EnergyPricesIn, ctx: AdminDep, session: SessionDep, window: PriceWindowDep
) -> EnergyPricesOut:
    """Per kWh in the workspace's currency, each from a date; the GPU-hour prices' rules
    (docs/money.md)."""
    entries = [(p.from_, p.per_kwh) for p in body.prices]
    await energy_rates.put_values(session, ctx, energy_rates.ENERGY_PRICES, entries, window)
    return await energy_rates.energy_prices(session, ctx, window)


@router.delete(
    "/energy-prices/{valid_from}",
    response_model=EnergyPricesOut,
    summary="Remove one electricity price within its window",
    responses=answers(409, meaning=_OUTSIDE_WINDOW),
)
async def delete_energy_price(
    valid_from: str, ctx: AdminDep, session: SessionDep, window: PriceWindowDep
) -> EnergyPricesOut:
    day = value_day(valid_from)
    await energy_rates.remove_value(session, ctx, energy_rates.ENERGY_PRICES, day, window)
    return await energy_rates.energy_prices(session, ctx, window)


@router.get("/carbon-intensity", response_model=CarbonIntensityOut, summary="Carbon intensity")
async def carbon_intensity(
    ctx: ReaderDep, session: SessionDep, window: PriceWindowDep
) -> CarbonIntensityOut:
    return await energy_rates.carbon_intensity(session, ctx, window)


@router.put(
    "/carbon-intensity",
    response_model=CarbonIntensityOut,
    summary="Replace the carbon intensity values",
    responses=answers(409, meaning=_OUTSIDE_WINDOW),
)
async def put_carbon_intensity(
    body: CarbonIntensityIn, ctx: AdminDep, session: SessionDep, window: PriceWindowDep
) -> CarbonIntensityOut:
    """Grams CO2e per kWh, each from a date; the GPU-hour prices' rules (docs/money.md)."""
    entries = [(v.from_, v.grams_per_kwh) for v in body.values]
    await energy_rates.put_values(session, ctx, energy_rates.CARBON_INTENSITY, entries, window)
    return await energy_rates.carbon_intensity(session, ctx, window)


@router.delete(
    "/carbon-intensity/{valid_from}",
    response_model=CarbonIntensityOut,
    summary="Remove one carbon intensity value within its window",
    responses=answers(409, meaning=_OUTSIDE_WINDOW),
)
async def delete_carbon_intensity(
    valid_from: str, ctx: AdminDep, session: SessionDep, window: PriceWindowDep
) -> CarbonIntensityOut:
    day = value_day(valid_from)
    await energy_rates.remove_value(session, ctx, energy_rates.CARBON_INTENSITY, day, window)
    return await energy_rates.carbon_intensity(session, ctx, window)


@router.get(
    "/reports/focus",
    response_class=Response,
    responses=FOCUS_CSV,
    summary="Cost export (FOCUS 1.2 CSV)",
)
async def focus(
    ctx: ReaderDep,
    request: Request,
    from_: Annotated[str, Query(alias=params.FROM, min_length=1, description=params.BOUND_HELP)],
    to: Annotated[str, Query(alias=params.TO, min_length=1, description=params.BOUND_HELP)],
    tz: Text = None,
) -> Response:
    """The window's held GPU-hours and their cost as a FOCUS 1.2 CSV (docs/money.md);
    days are cut in `tz`, the workspace's zone unless given."""
    window = params.parse_window(from_, to, tz or ctx.workspace.timezone)
    account = Account(slug=ctx.workspace.slug, name=ctx.workspace.name)
    conn = await take_report_connection(request, ctx.workspace_id)
    try:
        chunks = await prepare_focus(conn, ctx.workspace_id, account, window)
    except BaseException:
        await conn.close()
        raise
    start = window.local(window.start).date().isoformat()
    end = window.local(window.end).date().isoformat()
    filename = f"{ctx.workspace.slug}-focus-{start}-{end}.csv"
    return ReportStreamResponse(
        conn,
        chunks,
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )
