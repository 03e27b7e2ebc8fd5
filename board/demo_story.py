"""What the demo lab is besides its hosts: people in teams, bookings, a price, notices.

Each piece goes through the service a page or the API calls (directory, reservations,
prices, notice channels), as the people would have made it, so every page has something
to show and every figure comes from the board's own rules:

- alice and bob (team `vision`), carol and dave (team `language`): members, each linked
  in the directory to the Linux user the simulated hosts report;
- dave books the free card (GPU 2) of the first host for a day each week and leaves it
  idle (the reservations report's "reserved, idle"), and holds it again now; carol has
  booked the card she shares with dave (GPU 3) on another host for tomorrow;
- one price for the hosts' GPU model (EUR 0.85 a GPU-hour) from the first day of the
  history, so usage has a cost and the statements have totals;
- a mail channel (`ops@demo.example`) for every notice. Without a configured mail
  server the demo runs its own on loopback (MailSink), which takes each mail and keeps
  nothing but a count, so deliveries show as delivered and nothing leaves the machine.

The story is written once per workspace: the price is its last step, and a workspace
with a price is left as it is (a rerun adds nothing twice).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from board.auth.deps import WorkspaceContext
from board.auth.models import User, Workspace
from board.directory import service as directory
from board.directory.schemas import DirectoryEntryIn
from board.money import service as money
from board.money.corrections import CorrectionWindow
from board.money.schemas import PricesIn
from board.notices import service as notices
from board.notices.schemas import ChannelIn
from board.reservations import service as reservations
from board.reservations.schemas import ReservationIn
from board.settings import Settings
from board.workspaces.service import find_member

# (Linux user, member email, team): the people behind the fake hosts' processes.
TEAMS = (
    ("alice", "alice@demo.example", "vision"),
    ("bob", "bob@demo.example", "vision"),
    ("carol", "carol@demo.example", "language"),
    ("dave", "dave@demo.example", "language"),
)
CHANNEL_EMAILS = ["ops@demo.example"]
PRICE = {"currency": "EUR", "perGpuHour": "0.85"}
FREE_CARD = "GPU-2"  # the fake hosts' idle card (only the display server on it)
SHARED_CARD = "GPU-3"  # the card carol and dave share: never dave's booked one
ADDRESS = "127.0.0.1"  # what the audit log says the demo's changes came from


@dataclass(frozen=True)
class StoryHosts:
    """The hosts the story books: public ids, and their GPU model."""

    booked: str  # dave's, every week and now
    tomorrow: str  # carol's, tomorrow
    gpu_model: str


async def _context(session: AsyncSession, workspace: Workspace, email: str) -> WorkspaceContext:
    user = await session.scalar(select(User).where(User.email == email))
    assert user is not None, email
    member = await find_member(session, workspace.id, email)
    return WorkspaceContext(workspace, user.id, email, member.role, ADDRESS)


async def has_story(session: AsyncSession, admin: WorkspaceContext) -> bool:
    # Only whether any price exists: the correction window does not matter here.
    return bool((await money.prices(session, admin, CorrectionWindow.of_days(0))).prices)


async def write_story(
    session: AsyncSession,
    workspace: Workspace,
    admin_email: str,
    hosts: StoryHosts,
    history_start: datetime,
    settings: Settings,
    now: datetime | None = None,
) -> bool:
    """The directory, bookings, channel and price, unless the workspace has them already.

    The caller commits. Bookings need the hosts' GPUs known (one push each first).
    """
    now = now or datetime.now(UTC)
    admin = await _context(session, workspace, admin_email)
    if await has_story(session, admin):
        return False
    for linux_user, email, team in TEAMS:
        body = DirectoryEntryIn(member_email=email, team=team)
        await directory.put_entry(session, admin, linux_user, body)
    dave = await _context(session, workspace, "dave@demo.example")
    carol = await _context(session, workspace, "carol@demo.example")
    for start, end in _daves_days(history_start, now):
        booking = ReservationIn(
            host_id=hosts.booked,
            gpu_uuids=[FREE_CARD],
            start=start,
            end=end,
            note="a run that never started",
        )
        await reservations.create(session, dave, booking, now=start - timedelta(hours=1))
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    tomorrow = ReservationIn(
        host_id=hosts.tomorrow,
        gpu_uuids=[SHARED_CARD],
        start=midnight + timedelta(days=1, hours=9),
        end=midnight + timedelta(days=1, hours=17),
        note="fine-tuning",
    )
    await reservations.create(session, carol, tomorrow, now=now)
    channel = ChannelIn(kind="email", emails=CHANNEL_EMAILS)
    await notices.create_channel(session, admin, channel, settings)
    first_day = history_start.astimezone(UTC).date()
    prices = PricesIn.model_validate(
        {
            "currency": PRICE["currency"],
            "prices": [
                {"gpuModel": hosts.gpu_model, "perGpuHour": PRICE["perGpuHour"], "from": first_day}
            ],
        }
    )
    window = CorrectionWindow.of_days(settings.price_correction_days)
    await money.put_prices(session, admin, prices, window)
    return True


def _daves_days(history_start: datetime, now: datetime) -> list[tuple[datetime, datetime]]:
    """09:00-18:00 UTC on the same weekday each week of the history, and now until this
    time tomorrow (in force: the card sits idle under his booking)."""
    days = []
    day = (now - timedelta(days=7)).replace(hour=9, minute=0, second=0, microsecond=0)
    while day >= history_start + timedelta(hours=1):
        days.append((day, day + timedelta(hours=9)))
        day -= timedelta(days=7)
    days.reverse()
    start = (now - timedelta(hours=2)).replace(second=0, microsecond=0)
    days.append((start, start + timedelta(days=1)))
    return days


class MailSink:
    """A loopback SMTP server that takes every mail and keeps only a count."""

    def __init__(self) -> None:
        self.received = 0
        self.port = 0
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"smtp://127.0.0.1:{self.port}"

    async def start(self) -> MailSink:
        self._server = await asyncio.start_server(self._session, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
            self._server = None

    async def _session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async def say(*lines: str) -> None:
            writer.write("".join(f"{line}\r\n" for line in lines).encode())
            await writer.drain()

        try:
            await say("220 gua-board-demo mail sink")
            while line := await reader.readline():
                verb = line[:4].upper()
                if verb == b"EHLO":
                    await say("250-gua-board-demo", "250 8BITMIME")
                elif verb == b"DATA":
                    await say("354 end with <CRLF>.<CRLF>")
                    while await reader.readline() not in (b".\r\n", b""):
                        pass
                    self.received += 1
                    await say("250 kept (a count only)")
                elif verb == b"QUIT":
                    await say("221 bye")
                    break
                else:
                    await say("250 ok")
        except (OSError, ConnectionError):
            pass
        finally:
            writer.close()
