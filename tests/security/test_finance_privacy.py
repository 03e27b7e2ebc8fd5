"""Finance reads money, not people's work: no page tells a finance user a Linux user,
whether by searching, grouping or sorting the fleet (not even how many GPUs match).
"""

from __future__ import annotations

from tests.security.conftest import World
from tests.support.live import LiveBoard


def test_finance_cannot_find_a_linux_user_through_the_pages(board: LiveBoard, world: World) -> None:
    """No process details for finance: searching, grouping or sorting the fleet by a Linux
    user tells nothing (not even how many GPUs match), and no page names one."""
    a = world.a
    user = world.a_linux_user
    s = f"/w/{a.slug}"
    host = a.hosts[0].host_id
    paths = [
        f"{s}/?q={user}",
        f"{s}/?group=user",
        f"{s}/?group=user&view=dense",
        f"{s}/?sort=user",
        f"{s}/fleet.json?q={user}",
        f"{s}/fleet.json?group=user",
        f"{s}/people",
        f"{s}/people?sort=hours",
        f"{s}/hosts/{host}?range=24h",
        f"{s}/hosts/{host}?range=7d",
        f"{s}/reservations",
    ]
    with board.signed_in(a.finance.email, a.finance.password) as c:
        nothing = board.call(c, "GET", f"{s}/fleet.json?q=no-such-user-anywhere")
        found = board.call(c, "GET", f"{s}/fleet.json?q={user}")
        for path in paths:
            reply = board.call(c, "GET", path)
            assert reply.status_code in (200, 403, 404), reply
            text = reply.text.replace(f'value="{user}"', "")  # the search box's own echo
            assert user not in text, f"finance sees a Linux user on {path}"
    assert nothing.status_code == found.status_code == 200, (nothing, found)
    shown = ("hosts", "counts")
    assert {k: found.json().get(k) for k in shown} == {k: nothing.json().get(k) for k in shown}, (
        "finance's search for a Linux user finds GPUs"
    )
