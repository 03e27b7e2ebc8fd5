"""What ships beside the code and no test server runs: the alert rules and the Grafana
dashboard name only metrics the board exports; the image runs unprivileged with a
health check; compose waits for a healthy database. (No promtool, Docker engine or
registry here: structure is checked, not a real Prometheus or a built image.)"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped,unused-ignore]
from prometheus_client.metrics import MetricWrapperBase

from board.metrics import registry

REPO = Path(__file__).resolve().parents[2]
OBSERVABILITY = REPO / "docs" / "observability"
METRIC_NAME = re.compile(r"\bgua_board_[a-z_]+\b")
DURATION = re.compile(r"^\d+[smhd]$")


def exported_names() -> set[str]:
    """Every sample name the board's /metrics can show."""
    # Computed at scrape time (board/hosts/freshness_metric.py, board/health/metric.py).
    names = {"gua_board_hosts", "gua_board_gpus"}
    for value in vars(registry).values():
        if not isinstance(value, MetricWrapperBase):
            continue
        for family in value.describe():
            suffixes = {
                "counter": ("_total",),
                "histogram": ("_bucket", "_sum", "_count"),
                "gauge": ("",),
            }[family.type]
            names.update(family.name + s for s in suffixes)
    return names


def balanced(expr: str) -> bool:
    depth = {"(": 0, "{": 0, "[": 0}
    pairs = {")": "(", "}": "{", "]": "["}
    for ch in re.sub(r'"[^"]*"', "", expr):
        if ch in depth:
            depth[ch] += 1
        elif ch in pairs:
            depth[pairs[ch]] -= 1
            if depth[pairs[ch]] < 0:
                return False
    return not any(depth.values())


def test_alert_rules_are_well_formed_and_name_real_metrics() -> None:
    rules = yaml.safe_load((OBSERVABILITY / "alerts.yml").read_text())
    exported = exported_names()
    seen: set[str] = set()
    assert rules["groups"], "no rule group"
    for group in rules["groups"]:
        assert isinstance(group["name"], str)
        assert group["rules"]
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
            assert re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", rule["alert"]), rule
            assert rule["alert"] not in seen, f"{rule['alert']} twice"
            seen.add(rule["alert"])
            expr = rule["expr"]
            assert isinstance(expr, str), expr
            assert balanced(expr), expr
            assert "for" not in rule or DURATION.match(rule["for"]), rule
            assert rule["labels"]["severity"] in {"critical", "warning"}, rule
            assert rule["annotations"]["summary"], rule
            unknown = set(METRIC_NAME.findall(expr)) - exported
            assert not unknown, f"{rule['alert']} names metrics the board lacks: {unknown}"
    for metric in ("gua_board_observations_rejected_total", "gua_board_hosts"):
        assert any(metric in r["expr"] for g in rules["groups"] for r in g["rules"]), metric


def targets(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def test_the_grafana_dashboard_reads_real_metrics() -> None:
    dashboard = json.loads((OBSERVABILITY / "grafana-dashboard.json").read_text())
    assert dashboard["title"]
    assert dashboard["uid"]
    exprs = targets(dashboard)
    assert exprs
    exported = exported_names()
    used: set[str] = set()
    for expr in exprs:
        assert balanced(expr), expr
        used.update(METRIC_NAME.findall(expr))
    assert not used - exported, used - exported
    # Every metric of the issue is on the dashboard.
    for name in (
        "gua_board_observations_accepted_total",
        "gua_board_observations_rejected_total",
        "gua_board_ingest_batch_size_sum",
        "gua_board_ingest_commit_seconds_bucket",
        "gua_board_report_seconds_bucket",
        "gua_board_notices_delivered_total",
        "gua_board_notices_failed_total",
        "gua_board_hosts",
    ):
        assert name in used, name
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = (REPO / "Dockerfile").read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_the_image_runs_unprivileged_with_a_health_check() -> None:
    steps = dockerfile_instructions()
    words = [w for w, _ in steps]
    users = [rest for w, rest in steps if w == "USER"]
    assert users, "no USER: the image would run as root"
    assert users[-1].split(":")[0] not in {"root", "0"}
    assert words.index("USER") < words.index("CMD")
    health = [rest for w, rest in steps if w == "HEALTHCHECK"]
    assert len(health) == 1
    assert "CMD" in health[0]
    assert "/healthz" in health[0]
    cmd = json.loads(next(rest for w, rest in steps if w == "CMD"))
    assert cmd[:2] == ["gua-board", "serve"]
    # The user that RUN created is the one switched to.
    created = next(rest for w, rest in steps if w == "RUN" and "useradd" in rest)
    assert users[-1] in shlex.split(created)


def test_compose_waits_for_a_healthy_database_and_checks_the_board() -> None:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    db, board = compose["services"]["db"], compose["services"]["board"]
    assert "pg_isready" in " ".join(db["healthcheck"]["test"])
    assert board["depends_on"]["db"]["condition"] == "service_healthy"
    assert any("/healthz" in part for part in board["healthcheck"]["test"])
    assert "GUA_BOARD_SECRET_KEY" in board["environment"]
    # Published on loopback only: TLS goes in front (docs/operations.md).
    assert all(str(p).startswith("127.0.0.1:") for p in board["ports"])
