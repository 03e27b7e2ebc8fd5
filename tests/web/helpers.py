"""Helpers for the web tests: signing in over plain HTTP, reading CSRF tokens from forms."""

from __future__ import annotations

import re

import httpx

PASSWORD = "correct-horse-battery"
_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_of(html: str) -> str:
    match = _CSRF.search(html)
    assert match, "no CSRF token in the page"
    return match.group(1)


async def sign_in(
    client: httpx.AsyncClient, email: str, password: str = PASSWORD, next: str = "/"
) -> httpx.Response:
    form = await client.get("/signin")
    assert form.status_code == 200, form.text
    return await client.post(
        "/signin",
        data={
            "csrf_token": csrf_of(form.text),
            "email": email,
            "password": password,
            "next": next,
        },
    )
