"""`gua-board`: serve, administer and maintain a GUA Board (see docs/operations.md)."""

from __future__ import annotations

import argparse
import sys

from board.cli import commands


def port(text: str) -> int:
    """A TCP port; the socket layer would otherwise wrap 99999 to another port silently."""
    value = _whole(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, not {text!r}")
    return value


def at_least_one(text: str) -> int:
    value = _whole(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {text!r}")
    return value


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value <= 86_400:
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most 86400, not {text!r}")
    return value


def whole(text: str) -> int:
    """0 or more, in plain ASCII digits (a few of them)."""
    return _whole(text)


def _whole(text: str) -> int:
    if not (text.isascii() and text.isdigit() and len(text) <= 9):
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gua-board", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="apply migrations, then serve the API and the board")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=port, default=8000)
    serve.add_argument("--workers", type=at_least_one, default=1)
    serve.set_defaults(func=commands.serve)

    migrate = sub.add_parser("migrate", help="apply migrations to the configured database")
    migrate.set_defaults(func=commands.migrate)

    ws = sub.add_parser("create-workspace", help="create a tenant")
    ws.add_argument("slug")
    ws.add_argument("--name")
    ws.set_defaults(func=commands.create_workspace)

    user = sub.add_parser("create-user", help="add a member; prints a new API token once")
    user.add_argument("email")
    user.add_argument("--workspace", required=True)
    user.add_argument("--role", required=True, choices=["admin", "member", "finance", "scheduler"])
    user.add_argument("--password-stdin", action="store_true", help="read a password from stdin")
    user.add_argument("--json", action="store_true")
    user.set_defaults(func=commands.create_user)

    token = sub.add_parser("issue-token", help="a one-time enrollment token for a host")
    token.add_argument("--workspace", required=True)
    token.add_argument("--display-name")
    token.add_argument("--expires-in", type=float, metavar="HOURS")
    token.add_argument("--json", action="store_true")
    token.set_defaults(func=commands.issue_token)

    parts = sub.add_parser(
        "partitions", help="create and drop raw-history partitions, compact closed days, now"
    )
    parts.set_defaults(func=commands.partitions)

    rollups = sub.add_parser("rollups", help="hourly rollup maintenance")
    rollups_sub = rollups.add_subparsers(dest="rollups_command", required=True)
    rebuild = rollups_sub.add_parser("rebuild", help="recompute rollups from raw samples")
    rebuild.add_argument("--workspace", required=True)
    rebuild.add_argument("--from", dest="from_", metavar="FROM")
    rebuild.add_argument("--to")
    rebuild.set_defaults(func=commands.rollups_rebuild)

    demo = sub.add_parser("demo", help="serve with a demo workspace and simulated hosts")
    demo.add_argument("--host", default="127.0.0.1", help="address to listen on")
    demo.add_argument("--port", type=port, default=8000, help="port to listen on")
    demo.add_argument("--hosts", type=whole, default=4, help="simulated hosts (at most 50)")
    demo.add_argument(
        "--interval", type=positive_seconds, default=5.0, help="seconds between pushes"
    )
    demo.set_defaults(func=commands.demo)

    remove = sub.add_parser(
        "remove-member", help="end a membership, its API tokens and the person's sessions"
    )
    remove.add_argument("email")
    remove.add_argument("--workspace", required=True)
    remove.set_defaults(func=commands.remove_member)

    revoke = sub.add_parser("revoke-api-token", help="revoke a personal API token at once")
    revoke.add_argument("token_prefix", metavar="TOKEN_PREFIX", help="gua_pat_xxxxxxxx")
    revoke.add_argument("--workspace", required=True)
    revoke.set_defaults(func=commands.revoke_api_token)

    signout = sub.add_parser("sign-out", help="end every web session of a person")
    signout.add_argument("email")
    signout.set_defaults(func=commands.sign_out)

    password = sub.add_parser(
        "set-password",
        help="operator reset: set a person's password (read from stdin), ending their sessions",
    )
    password.add_argument("email")
    password.add_argument("--password-stdin", action="store_true", required=True)
    password.set_defaults(func=commands.set_password)
    return parser


def _undecodable(argv: list[str]) -> int | None:
    """The position (from 1) of the first argument that is not UTF-8 (Python keeps such
    bytes as lone surrogates, which PostgreSQL's driver refused with a traceback). Only
    its position is shown: it may be a token."""
    for position, arg in enumerate(argv, start=1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            return position
    return None


def main(argv: list[str] | None = None) -> None:
    bad = _undecodable(sys.argv[1:] if argv is None else argv)
    if bad is not None:
        print(f"gua-board: argument {bad} is not UTF-8 text", file=sys.stderr)
        sys.exit(2)
    args = build_parser().parse_args(argv)
    try:
        code = args.func(args)
    except commands.CommandError as exc:
        print(f"gua-board: {exc}", file=sys.stderr)
        sys.exit(2)
    except Exception as exc:
        explained = commands.explain_database_error(exc)
        if explained is None:
            raise
        print(f"gua-board: {explained}", file=sys.stderr)
        sys.exit(2)
    sys.exit(code or 0)
