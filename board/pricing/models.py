"""Pricing's tables: a workspace's currency and its prices per GPU model (money edits
them: board/money/service.py).

The view `price_ranges` (migration "prices") turns each price into the range
[starts_at, next start of the same model) that reports join to price an hour.
"""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Date,
    DateTime,
    ForeignKey,
    Numeric,
    PrimaryKeyConstraint,
    SmallInteger,
    Text,
    func,
)
from sqlalchemy.orm import Mapped, mapped_column

from board.db.base import Base

# The view a migration makes over `prices` (each price with the date it stops), owned
# here like the tables (tests/test_layers.py reads this).
OWNED_RELATIONS = ("price_ranges",)


class WorkspaceCurrency(Base):
    """The one currency a workspace's prices and costs are in (ISO 4217)."""

    __tablename__ = "workspace_currencies"

    workspace_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("workspaces.id", ondelete="CASCADE")
    )
    currency: Mapped[str] = mapped_column(Text)
    # Digits after the decimal point (EUR 2, JPY 0, KWD 3): costs are rounded to these.
    minor_units: Mapped[int] = mapped_column(SmallInteger)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id"),
        CheckConstraint("currency ~ '^[A-Z]{3}$'", name="currency_code"),
        CheckConstraint("minor_units BETWEEN 0 AND 4", name="minor_units_range"),
    )


class Price(Base):
    """A price per GPU-hour for one GPU model (or `*`: any other), from a date on.

    `starts_at` is midnight of `valid_from` in the workspace's zone when the price was
    stored (`zone`), fixed then: changing the workspace's zone later does not move
    the history of prices.
    """

    __tablename__ = "prices"

    workspace_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("workspaces.id", ondelete="CASCADE")
    )
    gpu_model: Mapped[str] = mapped_column(Text)
    valid_from: Mapped[date] = mapped_column(Date)
    starts_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    zone: Mapped[str] = mapped_column(Text)
    per_gpu_hour: Mapped[Decimal] = mapped_column(Numeric(18, 6))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "gpu_model", "valid_from"),
        CheckConstraint("length(gpu_model) BETWEEN 1 AND 100", name="gpu_model_length"),
        CheckConstraint("per_gpu_hour >= 0", name="per_gpu_hour_not_negative"),
    )


class EnergyPrice(Base):
    """The price of a kWh of electricity, in the workspace's currency, from a date on
    (until the next one). Dated like `Price`: `starts_at` is midnight of `valid_from`
    in the workspace's zone when it was stored (`zone`), fixed then."""

    __tablename__ = "energy_prices"

    workspace_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("workspaces.id", ondelete="CASCADE")
    )
    valid_from: Mapped[date] = mapped_column(Date)
    starts_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    zone: Mapped[str] = mapped_column(Text)
    per_kwh: Mapped[Decimal] = mapped_column(Numeric(18, 6))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "valid_from"),
        CheckConstraint("per_kwh >= 0", name="per_kwh_not_negative"),
    )


class CarbonIntensity(Base):
    """Grams of CO2e per kWh of the workspace's electricity, from a date on (until the
    next one); dated like `EnergyPrice`."""

    __tablename__ = "carbon_intensities"

    workspace_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("workspaces.id", ondelete="CASCADE")
    )
    valid_from: Mapped[date] = mapped_column(Date)
    starts_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    zone: Mapped[str] = mapped_column(Text)
    grams_per_kwh: Mapped[Decimal] = mapped_column(Numeric(18, 6))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())

    __table_args__ = (
        PrimaryKeyConstraint("workspace_id", "valid_from"),
        CheckConstraint("grams_per_kwh >= 0", name="grams_per_kwh_not_negative"),
    )
