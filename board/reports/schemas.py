"""The reports as the API shows them (`GET …/reports/usage`, `…/reports/utilization`).

The usage page reads them by attribute (`report.totals.held_gpu_hours`); the field order
here is the wire order (board.readmodels). The envelope is typed; the rows are built as
plain dicts (service.py says why), so their models below only document them for `/docs`.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field

from board.readmodels import IsoTime, ReadModel


class ReportCoverage(ReadModel):
    """Which part of the window has data: the first and last hour seen, in the report's zone."""

    earliest_data_at: IsoTime | None
    latest_data_at: IsoTime | None
    covered_gpu_hours: float


class UsageTotals(ReadModel):
    held_gpu_hours: float
    active_gpu_hours: float
    idle_held_gpu_hours: float
    # null when nothing was held.
    idle_held_share: float | None
    # The rows' exact costs summed, then rounded (null while no currency is set).
    cost: float | None = None
    currency: str | None = None
    # The rows' energy summed (UsageRow says what a row's energy is).
    energy_kwh: float = Field(0.0, alias="energyKWh")
    active_energy_kwh: float = Field(0.0, alias="activeEnergyKWh")
    idle_held_energy_kwh: float = Field(0.0, alias="idleHeldEnergyKWh")
    energy_covered_hours: float = 0.0
    energy_cost: float | None = None
    co2e_kg: float | None = Field(None, alias="co2eKg")


class UsageHead(ReadModel):
    """The usage report's window and grouping, as it was read (times in its zone)."""

    from_: IsoTime = Field(alias="from")
    to: IsoTime
    group_by: str
    tz: str
    # What a local day is when the zone is not a whole number of hours from UTC
    # (params.Window.hour_alignment); null where days run midnight to midnight.
    hour_alignment: str | None


class UtilizationHead(ReadModel):
    """The utilization report's window, grouping and bucket (times in its zone)."""

    from_: IsoTime = Field(alias="from")
    to: IsoTime
    group_by: str
    bucket: str
    tz: str
    hour_alignment: str | None


class _DocumentedRow(ReadModel):
    # A key field is there only for its groupBy: /docs must not list it as always present.
    model_config = ConfigDict(json_schema_serialization_defaults_required=False)


class UsageRow(_DocumentedRow):
    """One row: the key fields of its groupBy (only those), then its GPU-hours."""

    user: str | None = None
    # groupBy=team: the directory's team of the Linux users, null for those without one.
    team: str | None = None
    host_id: str | None = None
    display_name: str | None = None
    gpu_uuid: str | None = None
    gpu_index: int | None = None
    gpu_name: str | None = None
    day: str | None = None
    held_gpu_hours: float
    active_gpu_hours: float
    idle_held_gpu_hours: float
    idle_held_share: float | None
    # Not with groupBy=user: a Linux user holds GPUs, covered time belongs to the GPU.
    covered_gpu_hours: float | None = None
    # Held GPU-hours × the price in force per hour and GPU model, rounded to the
    # currency's minor unit (half to even); null while the workspace has no currency.
    cost: float | None
    currency: str | None
    # Energy (kWh): keyed by user or team, the users' share, split like held time (by
    # the GPU's state: active, idle-held); else the GPUs' own, in every state (idle too).
    energy_kwh: float = Field(alias="energyKWh")
    active_energy_kwh: float = Field(alias="activeEnergyKWh")
    idle_held_energy_kwh: float = Field(alias="idleHeldEnergyKWh")
    # The time that energy was measured over (a GPU reporting no power adds none).
    energy_covered_hours: float
    # kWh × the electricity price (carbon intensity) in force per hour; null unless one
    # was in force all through the energy-covered time (and that time is not 0).
    energy_cost: float | None
    co2e_kg: float | None = Field(alias="co2eKg")


class UsageReportOut(UsageHead):
    rows: list[UsageRow]
    totals: UsageTotals
    coverage: ReportCoverage


class UtilizationRow(_DocumentedRow):
    """One bucket of one host (hostId, displayName) or GPU (also gpuUuid, gpuIndex,
    gpuName); null averages where nothing was covered or no memory total is known."""

    host_id: str | None
    display_name: str
    gpu_uuid: str | None = None
    gpu_index: int | None = None
    gpu_name: str | None = None
    bucket_start: str
    covered_hours: float
    active_hours: float
    idle_held_hours: float
    idle_hours: float
    avg_util_pct: float | None
    avg_memory_used_pct: float | None
    # The GPU's (host's GPUs') energy in every state, and while idle (nobody holding it).
    energy_kwh: float = Field(alias="energyKWh")
    idle_energy_kwh: float = Field(alias="idleEnergyKWh")
    # energyKWh / energyCoveredHours, in watts (null when that time is 0).
    avg_power_w: float | None
    energy_covered_hours: float


class UtilizationReportOut(UtilizationHead):
    rows: list[UtilizationRow]
    coverage: ReportCoverage
