"""The agent's enrollment config file and where it and the spool live by default."""

from __future__ import annotations

import json
import logging
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from agent.fsutil import atomic_write

log = logging.getLogger(__name__)

CONFIG_ENV = "GUA_AGENT_CONFIG"
SPOOL_DIR_ENV = "GUA_AGENT_SPOOL_DIR"
ROOT_CONFIG_PATH = Path("/etc/gua-agent/config.json")
ROOT_STATE_DIR = Path("/var/lib/gua-agent")


class ConfigError(Exception):
    """The config is missing, unreadable or invalid; the message says what to do."""


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """What enrollment gave this host. `agent_token` is secret and kept out of repr()."""

    server_url: str
    host_id: str
    display_name: str
    agent_token: str = field(repr=False)
    token_prefix: str
    # Optional: the Slurm cluster (its ClusterName) this host is a node of, sent with
    # each process's job id; set by `enroll --cluster` or by editing the file.
    cluster: str | None = None

    def to_json(self) -> bytes:
        data = {
            "serverUrl": self.server_url,
            "hostId": self.host_id,
            "displayName": self.display_name,
            "agentToken": self.agent_token,
            "tokenPrefix": self.token_prefix,
        }
        if self.cluster is not None:
            data["cluster"] = self.cluster
        return (json.dumps(data, indent=2) + "\n").encode("utf-8")

    @classmethod
    def from_json(cls, raw: bytes) -> AgentConfig:
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ConfigError(f"not valid JSON ({exc})") from None
        if not isinstance(data, dict):
            raise ConfigError("not a JSON object")
        values: dict[str, str] = {}
        for key in ("serverUrl", "hostId", "displayName", "agentToken", "tokenPrefix"):
            value = data.get(key)
            if not isinstance(value, str) or not value:
                raise ConfigError(f"missing or empty field {key!r}")
            values[key] = value
        # As the claim's answer is checked: a token with a line end or a non-ASCII letter
        # (a hand-edited config) cannot go in a header, and the HTTP library's refusal
        # quoted the header, token and all, into the log.
        if TOKEN_SHAPE.fullmatch(values["agentToken"]) is None:
            raise ConfigError("field 'agentToken' is not a token (printable ASCII, no spaces)")
        cluster = data.get("cluster")
        if cluster is not None and not valid_cluster_name(cluster):
            raise ConfigError(
                "field 'cluster' must be a cluster name (1-64 printable characters, no spaces)"
            )
        return cls(
            server_url=normalize_server_url(values["serverUrl"]),
            host_id=values["hostId"],
            display_name=values["displayName"],
            agent_token=values["agentToken"],
            token_prefix=values["tokenPrefix"],
            cluster=cluster,
        )


CLUSTER_NAME_CHARS = 64


def valid_cluster_name(value: object) -> bool:
    """A Slurm ClusterName as the config may hold it: 1-64 printable characters, no spaces."""
    return (
        isinstance(value, str)
        and 0 < len(value) <= CLUSTER_NAME_CHARS
        and value.isprintable()
        and not any(ch.isspace() for ch in value)
    )


# What an agent token may hold: printable ASCII without spaces (what goes in a header).
TOKEN_SHAPE = re.compile(r"[\x21-\x7e]{1,1024}")


def normalize_server_url(url: str) -> str:
    """`https://board.example/` → `https://board.example`; refuses anything but http(s)."""
    text = url.strip().rstrip("/")
    try:
        parts = urlsplit(text)
    except ValueError as exc:  # "http://[::1" and the like
        raise ConfigError(f"server URL {url!r} cannot be read: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"server URL must start with http:// or https://, got {url!r}")
    if parts.query or parts.fragment:
        raise ConfigError("server URL must not carry a query or fragment")
    return text


def load_config(path: Path) -> AgentConfig:
    """Read the config written by `gua-agent enroll`."""
    try:
        raw = path.read_bytes()
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise ConfigError(f"{path} does not exist: run `gua-agent enroll` first") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("%s is readable by other users; it holds the agent token (chmod 600)", path)
    try:
        return AgentConfig.from_json(raw)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def save_config(path: Path, config: AgentConfig, *, force: bool = False) -> None:
    """Write the config atomically with mode 0600; an existing file needs `force`."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        atomic_write(path, config.to_json(), mode=0o600, overwrite=force)
    except FileExistsError:
        raise ConfigError(f"{path} already exists; pass --force to replace it") from None


def check_writable(path: Path, *, force: bool) -> None:
    """Fail before enrolling (which spends the one-time token) if the config cannot be written."""
    if path.exists() and not force:
        raise ConfigError(f"{path} already exists; pass --force to replace it")
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create {path.parent}: {exc.strerror}") from None
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise ConfigError(f"cannot write to {path.parent}")


def _is_root() -> bool:
    return os.geteuid() == 0


def default_config_path(env: Mapping[str, str] | None = None, root: bool | None = None) -> Path:
    """`$GUA_AGENT_CONFIG`, else /etc/gua-agent/config.json as root, else the XDG config dir."""
    env = os.environ if env is None else env
    if env.get(CONFIG_ENV):
        return Path(env[CONFIG_ENV])
    if _is_root() if root is None else root:
        return ROOT_CONFIG_PATH
    return _xdg(env, "XDG_CONFIG_HOME", ".config") / "gua-agent" / "config.json"


def default_spool_dir(
    host_id: str, env: Mapping[str, str] | None = None, root: bool | None = None
) -> Path:
    """`$GUA_AGENT_SPOOL_DIR` as given, else `<state dir>/spool/<hostId>`.

    The host id keeps two enrollments (or two agents sharing a user) from replaying
    each other's snapshots under the wrong token.
    """
    env = os.environ if env is None else env
    if env.get(SPOOL_DIR_ENV):
        return Path(env[SPOOL_DIR_ENV])
    base = (
        ROOT_STATE_DIR
        if (_is_root() if root is None else root)
        else _xdg(env, "XDG_STATE_HOME", ".local/state") / "gua-agent"
    )
    return base / "spool" / _safe_component(host_id)


def job_spool_dir(spool_dir: Path) -> Path:
    """Where job records wait for the board: inside the host's spool folder, so the
    agent service and `gua-agent job` (both run as root) find the same one."""
    return spool_dir / "jobs"


def job_starts_dir(spool_dir: Path) -> Path:
    """Where a Prolog leaves its job's start time for the Epilog."""
    return spool_dir / "job-starts"


def _xdg(env: Mapping[str, str], var: str, fallback: str) -> Path:
    value = env.get(var, "")
    # The XDG spec says relative values are invalid and must be ignored.
    if value and os.path.isabs(value):
        return Path(value)
    return Path(env.get("HOME") or os.path.expanduser("~")) / fallback


def _safe_component(text: str) -> str:
    cleaned = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text).strip(".")
    return cleaned or "host"
