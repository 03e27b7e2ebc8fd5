"""What idle-held GPUs burned in a window: the users' idle-held energy (the usage report
by user sums the same), its cost and CO2e at the rates in force (the daily digest)."""

from __future__ import annotations

from typing import Any

import psycopg
from pydantic import Field

from board.pricing.cost import Pricing, workspace_currency
from board.pricing.energy import co2e_kg, energy_cost, kwh, rated_parts, rated_sums_sql
from board.readmodels import ReadModel
from board.reportkit.params import Window
from board.reports import repository as repo
from board.reports import service

_UNPRICED = Pricing(in_force=False, by_model=False)


class IdleHeldEnergy(ReadModel):
    kwh: float = Field(alias="kWh")
    # Null without an electricity price (carbon intensity) in force all along.
    cost: float | None
    currency: str | None
    co2e_kg: float | None = Field(alias="co2eKg")


async def idle_held_energy(
    conn: psycopg.AsyncConnection[Any], workspace_id: int, window: Window
) -> IdleHeldEnergy:
    """The window's idle-held energy; its cost and CO2e are known when a rate was in
    force through all the held time it was measured over."""
    scope = await service.usage_scope(conn, workspace_id, window, day_keyed=False)
    rated = scope.rates.in_force
    sums = rated_sums_sql("idle_held_energy_uws", "energy_held_us", "e_seg") if rated else None
    statement = f"""
        SELECT coalesce(sum(idle_held_energy_uws), 0), coalesce(sum(energy_held_us), 0),
               {", ".join(sums) if sums else "NULL, NULL, NULL, NULL"}
        FROM {repo.user_source((), _UNPRICED, rated)}
    """
    with service.zone_known_to_database(window):
        cur = await conn.execute(statement, scope.params())
        row = await cur.fetchone()
    assert row is not None  # an aggregate always answers one row
    uws, covered = int(row[0]), int(row[1])
    cost_n, co2e_n, unpriced, unrated = rated_parts(row[2:], covered)
    currency = await workspace_currency(conn, workspace_id)
    return IdleHeldEnergy(
        kwh=kwh(uws),
        cost=energy_cost(cost_n, covered, unpriced, currency),
        currency=currency.code if currency else None,
        co2e_kg=co2e_kg(co2e_n, covered, unrated),
    )
