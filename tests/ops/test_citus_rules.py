"""The schema keeps Citus's rules for a cluster distributed by `workspace_id`.

Citus is not installed here, so PostgreSQL's own catalog is read after the migrations
(the test database is built by `alembic upgrade head`) and held to what Citus would
refuse (docs/operations.md, "Past one database: Citus"; ADR 0014):

- a tenant table's primary key, unique constraints and unique indexes include its
  distribution column (`workspace_id`; `id` for `workspaces`), and so do its exclusion
  constraints, with `=`;
- a foreign key between tenant tables pairs the two distribution columns; one from a
  tenant table to a reference table is fine, one from a reference table to a tenant
  table is not;
- a global secret is unique only through its route (`routing_keys`), never through an
  index of its tenant table: every token hash has a route kind, and its table holds it
  unique within the workspace.

The reference tables are the ones docs/operations.md lists: the test reads them there.
Partitions are checked through their parent.
"""

from __future__ import annotations

import re
from pathlib import Path

import psycopg

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"

# Token hashes looked up with no workspace known, and the route kind each goes through.
ROUTED = {
    ("hosts", "agent_token_hash"): "agent_token",
    ("api_tokens", "token_hash"): "api_token",
    ("enrollment_tokens", "token_hash"): "enrollment_token",
    ("calendar_feed_tokens", "token_hash"): "calendar_feed_token",
}
# Not tenant data: alembic's own bookkeeping.
NOT_DATA = {"alembic_version"}
# Known, documented gap (docs/operations.md): Citus takes an exclusion constraint only
# with `workspace_id WITH =`, which needs btree_gist; the move to Citus adds it.
EXCLUSIONS_AWAITING_BTREE_GIST = {("reservation_gpus", "no_overlap")}


def documented_reference_tables() -> set[str]:
    """The backquoted names of the "Reference tables" item of the Citus section."""
    text = DOC.read_text()
    section = text.split("## Past one database: Citus", 1)[1].split("\n## ", 1)[0]
    item = re.search(r"^- \*\*Reference tables\*\*(.*?)(?=^- \*\*|\Z)", section, re.S | re.M)
    assert item, "docs/operations.md: no '- **Reference tables**' item in the Citus section"
    return set(re.findall(r"`([a-z_][a-z0-9_]*)`", item.group(1)))


def distribution_column(table: str) -> str:
    return "id" if table == "workspaces" else "workspace_id"


def _tables(conn: psycopg.Connection) -> set[str]:
    found = conn.execute(
        "SELECT c.relname FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace "
        "AND c.relkind IN ('r', 'p') AND NOT c.relispartition"
    ).fetchall()
    return {str(name) for (name,) in found} - NOT_DATA


def test_the_reference_tables_are_the_documented_ones_and_exist(database_url: str) -> None:
    documented = documented_reference_tables()
    assert {"users", "web_sessions", "signin_failures", "sso_logins", "routing_keys"} <= (
        documented
    )
    with psycopg.connect(database_url) as conn:
        assert documented <= _tables(conn), documented - _tables(conn)


def test_every_tenant_table_has_its_distribution_column(database_url: str) -> None:
    reference = documented_reference_tables()
    with psycopg.connect(database_url) as conn:
        columns = {
            (str(t), str(c))
            for t, c in conn.execute(
                "SELECT c.relname, a.attname FROM pg_attribute a "
                "JOIN pg_class c ON c.oid = a.attrelid "
                "WHERE c.relnamespace = 'public'::regnamespace AND a.attnum > 0 "
                "AND NOT a.attisdropped"
            ).fetchall()
        }
        tenant = _tables(conn) - reference
    missing = sorted(t for t in tenant if (t, distribution_column(t)) not in columns)
    assert not missing, f"tenant tables without workspace_id: {missing}"


def test_every_tenant_key_includes_the_distribution_column(database_url: str) -> None:
    """Primary keys, unique constraints, unique indexes (partial or on expressions too)
    and exclusion constraints of tenant tables."""
    reference = documented_reference_tables()
    with psycopg.connect(database_url) as conn:
        keys = conn.execute(
            """
            SELECT c.relname, i.relname, x.indisprimary, x.indisexclusion,
                   array(SELECT a.attname FROM unnest(x.indkey::int2[]) WITH ORDINALITY k(n, o)
                         JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.n
                         WHERE k.o <= x.indnkeyatts ORDER BY k.o),
                   coalesce(array(SELECT o.oprname FROM pg_constraint k
                                  JOIN unnest(k.conexclop) WITH ORDINALITY e(op, n) ON true
                                  JOIN pg_operator o ON o.oid = e.op
                                  WHERE k.conindid = x.indexrelid ORDER BY e.n), '{}'),
                   pg_get_indexdef(x.indexrelid)
            FROM pg_index x
            JOIN pg_class c ON c.oid = x.indrelid
            JOIN pg_class i ON i.oid = x.indexrelid
            WHERE c.relnamespace = 'public'::regnamespace AND NOT c.relispartition
              AND (x.indisunique OR x.indisexclusion)
            """
        ).fetchall()
    assert keys
    bad, exclusions = [], set()
    for table, index, _primary, exclusion, columns, operators, definition in keys:
        if table in reference or table in NOT_DATA:
            continue
        column = distribution_column(table)
        if exclusion:
            # Only when the column itself is compared with `=` (not inside an expression).
            paired = (
                dict(zip(columns, operators, strict=False))
                if len(columns) == len(operators)
                else {}
            )
            if paired.get(column) != "=":
                exclusions.add((table, index))
        elif column not in columns:
            bad.append(definition)
    assert not bad, "tenant keys without workspace_id:\n" + "\n".join(sorted(bad))
    assert exclusions == EXCLUSIONS_AWAITING_BTREE_GIST, exclusions


def test_foreign_keys_stay_within_a_workspace_or_point_at_reference_tables(
    database_url: str,
) -> None:
    reference = documented_reference_tables()
    with psycopg.connect(database_url) as conn:
        keys = conn.execute(
            """
            SELECT k.conname, f.relname, t.relname,
                   array(SELECT a.attname FROM unnest(k.conkey) WITH ORDINALITY u(n, o)
                         JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.n
                         ORDER BY u.o),
                   array(SELECT a.attname FROM unnest(k.confkey) WITH ORDINALITY u(n, o)
                         JOIN pg_attribute a ON a.attrelid = k.confrelid AND a.attnum = u.n
                         ORDER BY u.o)
            FROM pg_constraint k
            JOIN pg_class f ON f.oid = k.conrelid
            JOIN pg_class t ON t.oid = k.confrelid
            WHERE k.contype = 'f' AND k.connamespace = 'public'::regnamespace
              AND NOT f.relispartition AND k.conparentid = 0
            """
        ).fetchall()
    assert keys
    bad = []
    for name, source, target, columns, referred in keys:
        if source in reference:
            if target not in reference:
                bad.append(f"{name}: reference table {source} → tenant table {target}")
        elif target not in reference:
            pair = (distribution_column(source), distribution_column(target))
            if pair not in zip(columns, referred, strict=True):
                bad.append(f"{name}: {source}{columns} → {target}{referred}")
    assert not bad, "foreign keys Citus would refuse:\n" + "\n".join(bad)


def test_global_secrets_are_unique_only_through_their_routes(database_url: str) -> None:
    """Every token hash of a tenant table is routed (routing_keys' kinds name it) and is
    unique within its workspace; the catalog's other global keys are the reference
    tables' (the test above holds tenant tables to that)."""
    reference = documented_reference_tables()
    with psycopg.connect(database_url) as conn:
        hashes = {
            (str(t), str(c))
            for t, c in conn.execute(
                "SELECT c.relname, a.attname FROM pg_attribute a "
                "JOIN pg_class c ON c.oid = a.attrelid "
                "WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p') "
                "AND NOT c.relispartition AND a.attname LIKE '%token_hash' "
                "AND NOT a.attisdropped"
            ).fetchall()
            if t not in reference
        }
        kinds_check = conn.execute(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE conname = 'ck_routing_keys_kind_known'"
        ).fetchone()
        uniques = {
            (str(t), tuple(cols))
            for t, cols in conn.execute(
                """
                SELECT c.relname, array(SELECT a.attname FROM unnest(x.indkey::int2[]) k(n)
                                        JOIN pg_attribute a
                                          ON a.attrelid = c.oid AND a.attnum = k.n)
                FROM pg_index x JOIN pg_class c ON c.oid = x.indrelid
                WHERE c.relnamespace = 'public'::regnamespace AND x.indisunique
                  AND x.indpred IS NULL
                """
            ).fetchall()
        }
    assert hashes == set(ROUTED), f"token hashes without a route kind: {hashes - set(ROUTED)}"
    assert kinds_check is not None
    for (table, column), kind in ROUTED.items():
        assert f"'{kind}'" in kinds_check[0], kind
        assert (table, ("workspace_id", column)) in uniques, (table, column)
