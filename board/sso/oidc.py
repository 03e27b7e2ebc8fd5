"""The OpenID Connect protocol, by authlib: discovery, the authorization URL, the code
exchange with PKCE, and the ID token's checks (signature by the provider's JWKS, iss,
aud, exp, iat, nonce).

Discovery documents and key sets are cached per process for a few minutes; a key id the
cached set does not know makes one fresh fetch (the provider rotated its keys).
"""

from __future__ import annotations

import asyncio
import json
import time
import warnings
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx

from board.settings import OidcProvider

# authlib 1.x announces, on import, that its `jose` and httpx modules will move (to
# joserfc and httpx2) before 2.0; they work, and the notice would open every `gua-board`
# command's output. Moving to joserfc touches only this module.
with warnings.catch_warnings():
    from authlib.deprecate import AuthlibDeprecationWarning  # type: ignore[import-untyped]

    # (authlib.deprecate itself asks for "always" on import, so this comes after it)
    warnings.simplefilter("ignore", AuthlibDeprecationWarning)
    from authlib.common.security import generate_token  # type: ignore[import-untyped]
    from authlib.integrations.base_client.errors import OAuthError  # type: ignore[import-untyped]
    from authlib.integrations.httpx_client import AsyncOAuth2Client  # type: ignore[import-untyped]
    from authlib.jose import JsonWebKey, KeySet, jwt  # type: ignore[import-untyped]
    from authlib.jose.errors import JoseError  # type: ignore[import-untyped]
    from authlib.oauth2.rfc6749.errors import OAuth2Error  # type: ignore[import-untyped]
    from authlib.oidc.core import CodeIDToken  # type: ignore[import-untyped]

CACHE_SECONDS = 300
HTTP_SECONDS = 10.0
# Bounds on what a provider may send back (a discovery document or key set is a few KiB).
MAX_DOCUMENT_BYTES = 256 * 1024
CLOCK_LEEWAY_SECONDS = 60


class SsoFailed(Exception):
    """A sign-in that cannot finish; the sentence is shown to the person (no secrets)."""


@dataclass(frozen=True)
class Endpoints:
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str


@dataclass(frozen=True)
class Started:
    url: str  # where the browser goes: the provider's authorization endpoint
    state: str
    nonce: str
    code_verifier: str


@dataclass(frozen=True)
class Identity:
    subject: str
    email: str | None
    email_verified: bool | None


_discovery: dict[str, tuple[float, Endpoints]] = {}
_keys: dict[str, tuple[float, KeySet]] = {}


def _unpacker(encoding: str) -> Any:
    """A bounded decoder for the answer's Content-Encoding: none, or one gzip or deflate
    layer (decoded with a bound on its output); anything else is refused."""
    kind = encoding.strip().lower()
    if kind in ("", "identity"):
        return None
    if kind in ("gzip", "x-gzip"):
        return zlib.decompressobj(zlib.MAX_WBITS | 16)
    if kind == "deflate":
        return zlib.decompressobj()
    raise SsoFailed("The sign-in provider answered in an encoding the board does not read.")


class _BoundedStream(httpx.AsyncByteStream):
    """An answer's body, decoded here (one gzip or deflate layer at most, see _unpacker)
    and cut off past MAX_DOCUMENT_BYTES with an SsoFailed."""

    def __init__(self, inner: httpx.AsyncByteStream, encoding: str) -> None:
        self.inner = inner
        self.unpacker = _unpacker(encoding)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        too_big = SsoFailed("The sign-in provider answered with an error. Try again later.")
        total = 0
        async for raw in self.inner:
            chunk = raw
            if self.unpacker is not None:
                try:
                    chunk = self.unpacker.decompress(raw, MAX_DOCUMENT_BYTES + 1 - total)
                except zlib.error:
                    raise SsoFailed("The sign-in provider sent something unreadable.") from None
                if self.unpacker.unconsumed_tail:
                    raise too_big
            total += len(chunk)
            if total > MAX_DOCUMENT_BYTES:
                raise too_big
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


async def _ask_gzip_or_plain(request: httpx.Request) -> None:
    request.headers["Accept-Encoding"] = "gzip, identity"


async def _bound_answer(response: httpx.Response) -> None:
    """Every answer of the provider: httpx reads it whole and decodes each chunk as the
    provider asks (a few hundred bytes gzipped twice are gigabytes), so the body reaches
    it already decoded, and bounded, here (before anything is read)."""
    encoding = response.headers.pop("content-encoding", "")
    response.headers.pop("content-length", None)
    assert isinstance(response.stream, httpx.AsyncByteStream)
    try:
        response.stream = _BoundedStream(response.stream, encoding)
    except SsoFailed:
        await response.aclose()
        raise


# On every client that talks to the provider (the proxy settings stay httpx's own).
_HOOKS: dict[str, list[Any]] = {"request": [_ask_gzip_or_plain], "response": [_bound_answer]}


async def _get_json(url: str) -> dict[str, Any]:
    try:
        async with (
            # httpx's timeout bounds each read; this bounds the whole answer (a trickle).
            asyncio.timeout(HTTP_SECONDS * 2),
            httpx.AsyncClient(timeout=HTTP_SECONDS, event_hooks=_HOOKS) as client,
        ):
            response = await client.get(url, headers={"Accept": "application/json"})
            if response.status_code != 200:
                raise SsoFailed("The sign-in provider answered with an error. Try again later.")
            content = response.content
    except (httpx.HTTPError, TimeoutError):
        raise SsoFailed("The sign-in provider could not be reached. Try again later.") from None
    try:
        data = json.loads(content)
    except ValueError:
        raise SsoFailed("The sign-in provider sent something that is not JSON.") from None
    if not isinstance(data, dict):
        raise SsoFailed("The sign-in provider sent something unexpected.")
    return data


async def endpoints(provider: OidcProvider) -> Endpoints:
    """The provider's discovery document (its issuer must be the configured one)."""
    cached = _discovery.get(provider.issuer)
    if cached and cached[0] > time.monotonic():
        return cached[1]
    issuer = provider.issuer.rstrip("/")
    document = await _get_json(f"{issuer}/.well-known/openid-configuration")
    names = ("issuer", "authorization_endpoint", "token_endpoint", "jwks_uri")
    if not all(isinstance(document.get(name), str) for name in names):
        raise SsoFailed("The sign-in provider's discovery document is incomplete.")
    if document["issuer"].rstrip("/") != issuer:
        raise SsoFailed("The sign-in provider's discovery document names another issuer.")
    found = Endpoints(*(document[name] for name in names))
    _discovery[provider.issuer] = (time.monotonic() + CACHE_SECONDS, found)
    return found


async def _key_set(jwks_uri: str, fresh: bool) -> KeySet:
    cached = _keys.get(jwks_uri)
    if cached and cached[0] > time.monotonic() and not fresh:
        return cached[1]
    try:
        keys = JsonWebKey.import_key_set(await _get_json(jwks_uri))
    except (JoseError, ValueError, TypeError):
        raise SsoFailed("The sign-in provider's signing keys could not be read.") from None
    _keys[jwks_uri] = (time.monotonic() + CACHE_SECONDS, keys)
    return keys


def _client(provider: OidcProvider, redirect_uri: str) -> AsyncOAuth2Client:
    return AsyncOAuth2Client(
        client_id=provider.client_id,
        client_secret=provider.client_secret.get_secret_value(),
        scope="openid email",
        redirect_uri=redirect_uri,
        code_challenge_method="S256",
        timeout=HTTP_SECONDS,
        event_hooks=_HOOKS,
    )


async def start(provider: OidcProvider, redirect_uri: str) -> Started:
    """A new authorization request: fresh state, nonce and PKCE verifier."""
    found = await endpoints(provider)
    state, nonce, verifier = generate_token(43), generate_token(43), generate_token(64)
    async with _client(provider, redirect_uri) as client:
        url, _ = client.create_authorization_url(
            found.authorization_endpoint, state=state, nonce=nonce, code_verifier=verifier
        )
    return Started(url=url, state=state, nonce=nonce, code_verifier=verifier)


async def finish(
    provider: OidcProvider, redirect_uri: str, code: str, code_verifier: str, nonce: str
) -> Identity:
    """Trade the code for tokens and check the ID token; who signed in."""
    found = await endpoints(provider)
    async with _client(provider, redirect_uri) as client:
        try:
            token = await client.fetch_token(
                found.token_endpoint, code=code, code_verifier=code_verifier
            )
        except (OAuthError, OAuth2Error, ValueError):
            # A used, expired or forged code (invalid_grant) lands here.
            raise SsoFailed(
                "The sign-in provider did not accept this sign-in (it may have been used "
                "already). Start again."
            ) from None
        except httpx.HTTPError:
            raise SsoFailed("The sign-in provider could not be reached. Try again later.") from None
    id_token = token.get("id_token")
    if not isinstance(id_token, str) or len(id_token) > 64 * 1024:
        raise SsoFailed("The sign-in provider sent no ID token.")
    return await _verified(provider, found, id_token, nonce)


async def _verified(
    provider: OidcProvider, found: Endpoints, id_token: str, nonce: str
) -> Identity:
    options = {
        "iss": {"essential": True, "value": found.issuer},
        "aud": {"essential": True, "value": provider.client_id},
        "exp": {"essential": True},
        "iat": {"essential": True},
        "sub": {"essential": True},
        "nonce": {"essential": True},
    }
    params = {"nonce": nonce, "client_id": provider.client_id}
    claims = None
    for fresh in (False, True):
        keys = await _key_set(found.jwks_uri, fresh)
        try:
            claims = jwt.decode(
                id_token, keys, claims_cls=CodeIDToken, claims_options=options, claims_params=params
            )
            claims.validate(leeway=CLOCK_LEEWAY_SECONDS)
            break
        except ValueError:
            # authlib: no key with the token's key id; the provider may have rotated.
            claims = None
        except JoseError as exc:
            raise SsoFailed(f"The ID token was refused ({exc.error}).") from None
        except Exception as exc:
            # authlib checks the claims with joserfc, whose errors are not authlib's
            # (expired, another nonce, audience or issuer), and an HMAC or EC token under
            # an RSA key's id is a KeyError: a refusal each, never a 500 that would also
            # roll back the spending of the pending sign-in.
            reason = getattr(exc, "error", None)
            reason = reason if isinstance(reason, str) and reason else "not valid"
            raise SsoFailed(f"The ID token was refused ({reason[:60]}).") from None
    if claims is None:
        raise SsoFailed("The ID token is signed with a key the provider does not list.")
    return Identity(
        subject=str(claims["sub"]),
        email=_email_claim(claims.get("email")),
        email_verified=_verified_claim(claims.get("email_verified")),
    )


def _email_claim(value: object) -> str | None:
    """The email, lower case, when its case can be compared safely: Python lower-cases
    the Kelvin sign to an ASCII k, so "\u212aate@x" (another mailbox) signed in as kate@x.
    An address whose lower case differs from its ASCII lower case is refused."""
    if not isinstance(value, str):
        return None
    email = value.strip()
    lowered = email.lower()
    ascii_lowered = "".join(c.lower() if c.isascii() else c for c in email)
    if lowered != ascii_lowered:
        raise SsoFailed(
            "The provider's email address has letters whose case the board cannot compare "
            "safely; ask an admin to add you with a password instead."
        )
    return lowered


def _verified_claim(value: object) -> bool | None:
    """email_verified as said: absent is None (not every provider sends it); true, or the
    string "true" (some providers write booleans as strings), is yes; anything else said
    ("false", "0", a number) is no. A string used to count as not said, so "false" passed."""
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    return isinstance(value, str) and value.strip().lower() == "true"
