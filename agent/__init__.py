"""GUA Board host agent: reads NVIDIA GPUs through NVML and pushes snapshots to a board."""

from importlib import metadata

_FALLBACK_VERSION = "0.1.0"


def _version() -> str:
    try:
        return metadata.version("gua-board")
    except metadata.PackageNotFoundError:
        # Running from a source checkout that was never installed.
        return _FALLBACK_VERSION


__version__ = _version()
AGENT_VERSION = __version__
