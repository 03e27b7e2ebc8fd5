"""Where a webhook may go: the rules checked when a channel is made and again, on the
resolved addresses, at every delivery (a name may resolve elsewhere later: DNS rebinding).

https to public addresses only, unless GUA_BOARD_ALLOW_INSECURE_WEBHOOKS=true, which
also allows http and loopback or private addresses (tests, labs).
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from board.errors import Unprocessable

MAX_URL_LENGTH = 2000
IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


# The authority's userinfo: everything up to its last "@" before the path, query or fragment.
_USERINFO = re.compile(r"^((?:[A-Za-z][A-Za-z0-9+.-]*:)?//)[^/?#]*@")


def redacted_url(url: str) -> str:
    """A URL as shown or logged: any `user:pass@` replaced by `***@` (channels made
    before the rule below may hold one); deliveries use the stored URL."""
    return _USERINFO.sub(r"\1***@", url, count=1)


class UrlRefused(Exception):
    """A URL or the address it resolves to is not allowed; the message says why."""


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str
    port: int
    path: str  # with the query


def parse_target(url: str, allow_insecure: bool) -> Target:
    if len(url) > MAX_URL_LENGTH or any(c.isspace() or ord(c) < 32 for c in url):
        raise UrlRefused("The URL is too long or holds spaces or control characters.")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise UrlRefused("The URL is not valid.") from None
    if parts.scheme not in ("https", "http"):
        raise UrlRefused("The URL must start with https://.")
    if parts.scheme == "http" and not allow_insecure:
        raise UrlRefused("The URL must use https (http is allowed only in test setups).")
    if not parts.hostname:
        raise UrlRefused("The URL names no host.")
    if parts.username is not None or parts.password is not None:
        raise UrlRefused("The URL must not carry a user name or password.")
    try:
        # What getaddrinfo does with a name first: an empty label, one over 63
        # characters or a lone surrogate raised UnicodeError there (a 500).
        parts.hostname.encode("idna")
    except UnicodeError:
        raise UrlRefused("The URL's host name is not a valid name.") from None
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    default = 443 if parts.scheme == "https" else 80
    return Target(parts.scheme, parts.hostname, port or default, path)


def address_allowed(address: IpAddress, allow_insecure: bool) -> bool:
    if allow_insecure:
        return not (address.is_multicast or address.is_unspecified)
    if isinstance(address, ipaddress.IPv6Address):
        if address.is_site_local:  # fec0::/10, the private range IPv6 had first
            return False
        # An IPv4 address carried inside (mapped, or 6to4) is the one to judge.
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is not None:
            address = embedded
    return address.is_global and not (
        address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
    )


async def resolve(target: Target, allow_insecure: bool, timeout: float) -> IpAddress:
    """The address to connect to: every address the name has must be allowed."""
    try:
        literal = ipaddress.ip_address(target.host)
    except ValueError:
        literal = None
    if literal is not None:
        found = [literal]
    else:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                infos = await loop.getaddrinfo(
                    target.host, target.port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
                )
        except (OSError, TimeoutError):
            raise UrlRefused(f"The name {target.host[:100]} does not resolve.") from None
        found = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
    if not found:
        raise UrlRefused(f"The name {target.host[:100]} has no address.")
    for address in found:
        if not address_allowed(address, allow_insecure):
            raise UrlRefused(
                "The URL leads to a private, loopback, link-local or reserved address."
            )
    return found[0]


async def check_channel_url(url: str, allow_insecure: bool) -> str:
    """A channel's URL as given, or a 422 saying why not (a name that does not resolve
    now is accepted: it is checked again at every delivery)."""
    try:
        target = parse_target(url, allow_insecure)
        try:
            await resolve(target, allow_insecure, timeout=3.0)
        except UrlRefused as exc:
            if "resolve" not in str(exc):
                raise
    except UrlRefused as exc:
        raise Unprocessable(f"url: {exc}") from None
    return url
