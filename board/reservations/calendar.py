"""Bookings as an iCalendar feed (RFC 5545), for calendar apps to subscribe to."""

from __future__ import annotations

from datetime import UTC, datetime

from icalendar import Calendar, Event

from board.reservations.schemas import ReservationOut


def ics(workspace_slug: str, host_names: dict[str, str], bookings: list[ReservationOut]) -> bytes:
    cal = Calendar()
    cal.add("prodid", "-//GUA Board//reservations//EN")
    cal.add("version", "2.0")
    cal.add("x-wr-calname", f"GPU reservations: {workspace_slug}")
    stamp = datetime.now(UTC)
    for booking in bookings:
        host = host_names.get(booking.host_id, booking.host_id)
        event = Event()
        event.add("uid", f"{booking.reservation_id}@gua-board")
        event.add("dtstamp", stamp)
        event.add("dtstart", booking.start)
        event.add("dtend", booking.end)
        event.add("summary", f"{host}: {len(booking.gpu_uuids)} GPU(s) for {booking.member_email}")
        lines = [f"GPUs: {', '.join(booking.gpu_uuids)}"]
        if booking.linux_users:
            lines.append(f"Linux users: {', '.join(booking.linux_users)}")
        if booking.note:
            lines.append(booking.note)
        event.add("description", "\n".join(lines))
        cal.add_component(event)
    feed: bytes = cal.to_ical()
    return feed
