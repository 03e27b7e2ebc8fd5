"""Every table, imported once so alembic sees the whole metadata (a composition module,
like app.py: it imports every domain, and nothing imports it but the migrations)."""

from board.archives.models import ArchiveBackfill, ArchiveObject
from board.audit.models import AuditEvent
from board.auth.models import (
    ApiToken,
    Membership,
    RoutingKey,
    SignInFailure,
    User,
    WebSessionRow,
    Workspace,
)
from board.budgets.models import Budget, BudgetCheck, BudgetNotice
from board.db.base import Base
from board.directory.models import DirectoryEntry, DirectoryTeam
from board.enrollment.models import EnrollmentToken
from board.health.models import GpuRetirement, MaintenanceWindow
from board.hosts.models import Gpu, Host, HostRejection
from board.jobs.models import ClusterHost, JobGpu, JobHourFigure, OutsideJobHour, SchedulerJob
from board.notices.models import (
    NoticeChannel,
    NoticeDelivery,
    NoticeDigest,
    NoticeEpisode,
    NoticeEvent,
    NoticeSnooze,
)
from board.observations.tables import host_observations
from board.pricing.models import CarbonIntensity, EnergyPrice, Price, WorkspaceCurrency
from board.reports.bodies import ReportBody
from board.reservations.models import (
    CalendarFeedToken,
    Reservation,
    ReservationGpu,
    ReservationHourFigure,
)
from board.rollups.daily import GpuDayRollup, RollupDayVersion, RollupDirtyDay, UserDayRollup
from board.rollups.models import GpuHourRollup, HostHourRollup, UserHourRollup
from board.sso.models import SsoLogin

__all__ = [
    "ApiToken",
    "ArchiveBackfill",
    "ArchiveObject",
    "AuditEvent",
    "Base",
    "Budget",
    "BudgetCheck",
    "BudgetNotice",
    "CalendarFeedToken",
    "CarbonIntensity",
    "ClusterHost",
    "DirectoryEntry",
    "DirectoryTeam",
    "EnergyPrice",
    "EnrollmentToken",
    "Gpu",
    "GpuDayRollup",
    "GpuHourRollup",
    "GpuRetirement",
    "HostHourRollup",
    "Host",
    "HostRejection",
    "JobGpu",
    "JobHourFigure",
    "MaintenanceWindow",
    "Membership",
    "NoticeChannel",
    "NoticeDelivery",
    "NoticeDigest",
    "NoticeEpisode",
    "NoticeEvent",
    "NoticeSnooze",
    "OutsideJobHour",
    "Price",
    "Reservation",
    "ReservationGpu",
    "ReservationHourFigure",
    "ReportBody",
    "SchedulerJob",
    "RollupDayVersion",
    "RollupDirtyDay",
    "RoutingKey",
    "SignInFailure",
    "SsoLogin",
    "User",
    "UserDayRollup",
    "UserHourRollup",
    "WebSessionRow",
    "Workspace",
    "WorkspaceCurrency",
    "host_observations",
]
