"""One settings class, one env prefix (GUA_BOARD_), unsafe values refused at start-up."""

from __future__ import annotations

import re
import secrets
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

import platformdirs
from fastapi import Depends
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from starlette.requests import HTTPConnection

_WEAK_SECRETS = {"changeme", "secret", "password", "dev", "test", "insecure"}
# A domain name as an email's domain part: dot-separated labels, no wildcard.
_DOMAIN = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)(\.(?!-)[a-z0-9-]{1,63}(?<!-))*")


class OidcProvider(BaseModel):
    """One OpenID Connect provider people may sign in with (board.sso, docs/sso.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # In the board's URLs (/signin/sso/<name>) and the audit log.
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,31}$")
    display_name: str = Field(min_length=1, max_length=60)
    # Its discovery document is <issuer>/.well-known/openid-configuration.
    issuer: str = Field(pattern=r"^https?://[^\s]+$", max_length=500)
    client_id: str = Field(min_length=1, max_length=500)
    client_secret: SecretStr
    # The email domains this provider speaks for: it signs in the accounts of these
    # domains only (existing ones included), and, with join_workspace, a verified email
    # of one of them with no account yet gets one and joins it with join_role.
    allowed_domains: list[str] = Field(default_factory=list, max_length=50)
    # The operator's explicit word that the provider speaks for every existing account,
    # whatever its domain (one provider for the whole board); new people still join
    # only from allowed_domains. Neither set: refused at start-up, never "all".
    allow_any_domain: bool = False
    join_workspace: str | None = None
    join_role: Literal["admin", "member", "finance"] = "member"

    @field_validator("allowed_domains")
    @classmethod
    def _domains(cls, value: list[str]) -> list[str]:
        """Lower case, without a leading "@"; exact names only (no wildcards, no paths)."""
        domains = [d.strip().lstrip("@").lower() for d in value]
        for domain in domains:
            if not _DOMAIN.fullmatch(domain):
                raise ValueError(f"allowed_domains: {domain[:80]!r} is not a domain name")
        return domains

    @model_validator(mode="after")
    def _speaks_for_someone(self) -> OidcProvider:
        if not self.allowed_domains and not self.allow_any_domain:
            raise ValueError(
                f"provider {self.name!r} lists no allowed_domains: list the email domains "
                "it speaks for, or set allow_any_domain to true to let it sign in every "
                "account of the board"
            )
        return self


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GUA_BOARD_", extra="ignore")

    # When unset, an embedded PostgreSQL (pgserver) under data_dir is used.
    database_url: str | None = None
    data_dir: Path = Field(
        default_factory=lambda: Path(platformdirs.user_data_dir("gua-board", appauthor=False))
    )
    # Signs session cookies. When unset, a random key is generated once and kept in data_dir.
    secret_key: str | None = None
    raw_retention_days: int = Field(default=35, ge=2, le=3650)
    # The audit log and the rollups (what finance bills from) are kept at least this long,
    # whatever a workspace's retentionDays says: a workspace admin can lengthen their
    # keeping, never shorten it below the operator's floor (and so never erase a trail).
    min_retention_days: int = Field(default=400, ge=1, le=3650)
    partitions_ahead_days: int = Field(default=3, ge=1, le=60)
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024)
    max_future_seconds: int = Field(default=300, ge=0, le=3600)
    enrollment_token_ttl_hours: int = Field(default=24, ge=1, le=24 * 30)
    # A price may be added, corrected or removed until this many days after it starts;
    # then its hours count as billed (board/money/corrections.py).
    price_correction_days: int = Field(default=7, ge=0, le=366)
    maintenance_interval_seconds: int = Field(default=3600, ge=10)
    ingest_max_batch: int = Field(default=256, ge=1, le=5000)
    db_pool_size: int = Field(default=10, ge=1, le=200)
    log_level: str = "info"
    # Session cookies are marked Secure when this is true; unset (the default), when the
    # request came over https (X-Forwarded-Proto from a trusted proxy counts) or public_url
    # is https.
    cookie_secure: bool | None = None
    # Web sign-in: how long a session cookie lives, and failed attempts allowed per
    # email and client address within the window before sign-in answers 429.
    session_max_age_seconds: int = Field(default=12 * 3600, ge=60, le=30 * 24 * 3600)
    signin_max_failures: int = Field(default=5, ge=1, le=1000)
    signin_window_seconds: int = Field(default=300, ge=1, le=24 * 3600)
    # Failed sign-ins from one client address, whatever the emails, within the window.
    signin_max_failures_per_address: int = Field(default=50, ge=1, le=100_000)
    # argon2id costs ~64 MiB and tens of ms per check: at most this many run at once per
    # process, and at most password_queue more wait; beyond that sign-in answers 429.
    password_concurrency: int = Field(default=2, ge=1, le=64)
    password_queue: int = Field(default=16, ge=0, le=10_000)
    # Slow clients: the request line and headers must arrive within this long, and each
    # body chunk within http_body_idle_seconds (whole body: http_body_seconds).
    http_header_seconds: float = Field(default=10.0, gt=0, le=600)
    http_body_idle_seconds: float = Field(default=15.0, gt=0, le=600)
    http_body_seconds: float = Field(default=120.0, gt=0, le=3600)
    # The board's address as agents reach it (behind a proxy); shown in the `gua enroll`
    # command of the admin page. Unset: the address the admin's browser used.
    public_url: str | None = None
    # Raw-history archives uploaded by agents (board.archives). "local" keeps them under
    # archive_dir (default data_dir/archives); "package.module:factory" plugs in another
    # store, e.g. an S3-compatible one, built by factory(settings).
    archive_store: str = "local"
    archive_dir: Path | None = None
    # Archive limits, sized for the largest real day: the agent's fastest tick (1 s), 8 GPUs,
    # 16 processes each. gpu_sample: 86,400 x 8 = 691,200 rows of ~105 B (~70 MiB);
    # proc_sample: 86,400 x 8 x 16 = 11,059,200 rows of ~125 B (~1.3 GiB), which gzip
    # shrinks 16-38x to 45-85 MiB (measured on generated days). Each default leaves about
    # half as much again of headroom; beyond them an upload is refused (413).
    archive_max_bytes: int = Field(default=128 * 1024 * 1024, ge=1024)
    # Decompressed bytes of one object: at most this, and at most archive_max_expansion
    # times the upload (never below 4 MiB), so a small gzip bomb costs little CPU (real
    # archives expand 7-38x; deflate can reach ~1000x).
    archive_max_uncompressed_bytes: int = Field(default=2 * 1024 * 1024 * 1024, ge=1024)
    archive_max_expansion: int = Field(default=200, ge=10, le=2000)
    archive_max_rows: int = Field(default=16_000_000, ge=1)
    # One CSV record (a real row is ~130 characters; names are at most 255) and the
    # header's columns (the agent writes 10 at most).
    archive_max_row_chars: int = Field(default=4096, ge=256, le=1024 * 1024)
    archive_max_columns: int = Field(default=256, ge=16, le=4096)
    # Rows of one instant (ts) in one table, and their CSV text: a live push carries a
    # tick in at most 1 MiB; 4,096 rows is 64 GPUs x 64 processes.
    archive_max_tick_rows: int = Field(default=4096, ge=64, le=65_536)
    archive_max_tick_chars: int = Field(default=1024 * 1024, ge=64 * 1024, le=64 * 1024 * 1024)
    # An archive tick this close to a stored observation of the host is the same tick.
    archive_match_tolerance_ms: int = Field(default=1000, ge=0, le=60_000)
    backfill_poll_seconds: float = Field(default=30.0, gt=0, le=3600)
    # Single sign-on (board.sso): a JSON list of OidcProvider objects, e.g.
    # GUA_BOARD_SSO_PROVIDERS='[{"name": "okta", "display_name": "Okta", ...}]'.
    sso_providers: list[OidcProvider] = Field(default_factory=list, max_length=20)
    # A started sign-in is kept 10 minutes, until its callback: at most this many not yet
    # finished per client address (an IPv6 /64 is one client), and in all; beyond, a
    # start answers 429 with Retry-After.
    sso_max_pending_per_address: int = Field(default=20, ge=1, le=10_000)
    sso_max_pending: int = Field(default=10_000, ge=1, le=1_000_000)
    # false: no password form, and POST /signin is refused (sign in with a provider).
    password_signin: bool = True
    # The live utilization stream (board.stream): how much recent history each process keeps.
    stream_keep_seconds: int = Field(default=300, ge=10, le=3600)
    # Operations (docs/operations.md). Logs: one JSON object a line ("json") or plain text;
    # the access log (one line per request) is off unless asked for.
    log_format: Literal["json", "text"] = "json"
    access_log: bool = False
    # /metrics: with a token, whoever sends it as a bearer token may scrape; without,
    # clients on loopback or private addresses only.
    metrics_enabled: bool = True
    metrics_token: str | None = None
    # A board process that is not the maintenance leader asks for the lock this often, so
    # the schedule moves to another process soon after the leader stops.
    maintenance_leader_retry_seconds: float = Field(default=30.0, gt=0, le=3600)
    # Notices (docs/notices.md). Mail: smtp://user:pass@host:port (STARTTLS when offered)
    # or smtps://… (TLS from the start); unset, no mail is sent. Webhooks: https to public
    # addresses only, unless allow_insecure_webhooks (tests, labs) also allows http and
    # loopback or private addresses.
    smtp_url: SecretStr | None = None
    mail_from: str = Field(default="gua-board@localhost", max_length=320)
    allow_insecure_webhooks: bool = False
    # How often each process looks for episodes starting or ending, and for deliveries due.
    notices_detect_seconds: float = Field(default=20.0, gt=0, le=3600)
    notices_poll_seconds: float = Field(default=2.0, gt=0, le=600)
    # One attempt's deadline; a claimed delivery not finished within the lease (a process
    # killed mid-send) is taken over by another worker.
    notices_timeout_seconds: float = Field(default=10.0, gt=0, le=120)
    notices_lease_seconds: float = Field(default=60.0, gt=0, le=3600)
    # Retries: base x 2^(attempt-1), jittered, at most an hour apart; then failed.
    notices_retry_base_seconds: float = Field(default=15.0, gt=0, le=3600)
    notices_max_attempts: int = Field(default=10, ge=1, le=100)

    @model_validator(mode="after")
    def _someone_can_sign_in(self) -> Settings:
        if not self.password_signin and not self.sso_providers:
            raise ValueError(
                "GUA_BOARD_PASSWORD_SIGNIN=false needs at least one GUA_BOARD_SSO_PROVIDERS "
                "entry: nobody could sign in"
            )
        names = [p.name for p in self.sso_providers]
        if len(set(names)) != len(names):
            raise ValueError("GUA_BOARD_SSO_PROVIDERS: each provider needs its own name")
        return self

    @field_validator("database_url")
    @classmethod
    def _postgres_only(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        if not value.startswith(("postgresql://", "postgresql+psycopg://", "postgres://")):
            raise ValueError("GUA_BOARD_DATABASE_URL must be a postgresql:// URL (PostgreSQL only)")
        return value

    @field_validator("metrics_token")
    @classmethod
    def _strong_metrics_token(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        if len(value) < 16 or value.lower() in _WEAK_SECRETS:
            raise ValueError("GUA_BOARD_METRICS_TOKEN must be at least 16 random characters")
        return value

    @field_validator("secret_key")
    @classmethod
    def _strong_secret(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        if len(value) < 32 or value.lower() in _WEAK_SECRETS:
            raise ValueError("GUA_BOARD_SECRET_KEY must be at least 32 random characters")
        return value

    def resolved_secret_key(self) -> str:
        """The configured key, else one generated once and kept (mode 0600) in data_dir."""
        if self.secret_key:
            return self.secret_key
        path = self.data_dir / "secret_key"
        if path.exists():
            return path.read_text().strip()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        key = secrets.token_urlsafe(48)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(key)
        tmp.chmod(0o600)
        tmp.replace(path)
        return key


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()


async def app_settings(connection: HTTPConnection) -> Settings:
    """The serving process's settings (the ones its app was created with).

    async: a plain def dependency would be run in the thread pool on every request.
    """
    settings: Settings = connection.app.state.runtime.settings
    return settings


SettingsDep = Annotated[Settings, Depends(app_settings)]
