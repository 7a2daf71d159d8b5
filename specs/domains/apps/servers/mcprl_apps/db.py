"""Shared helpers of the apps servers: the database path from the command line, one connection
per call (a transaction: committed when the call succeeds, rolled back when it raises), money.

Money is stored in integer cents and shown to the model as a number of dollars with two decimals.
"""

from __future__ import annotations

import argparse
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mcp.server.mcpserver.exceptions import ToolError


def db_path_from_args(prog: str, argv: list[str] | None = None) -> Path:
    """The ``--db`` path (relative paths resolve against the working directory)."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--db", required=True, help="SQLite database file of the application")
    return Path(parser.parse_args(argv).db)


class Database:
    """The application's SQLite file; it must exist (the environment's prepare hook seeds it)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        if not self.path.exists():
            raise ToolError(f"the database {self.path} does not exist (the environment was not seeded)")
        conn = sqlite3.connect(self.path, timeout=10.0)
        conn.row_factory = sqlite3.Row
        try:
            with conn:  # commit on success, roll back on an exception
                yield conn
        finally:
            conn.close()


def one(conn: sqlite3.Connection, sql: str, *params: Any) -> sqlite3.Row | None:
    row: sqlite3.Row | None = conn.execute(sql, params).fetchone()
    return row


def setting(conn: sqlite3.Connection, key: str) -> str:
    row = one(conn, "SELECT value FROM settings WHERE key = ?", key)
    if row is None:
        raise ToolError(f"the database has no setting {key!r}")
    return str(row["value"])


def dollars(cents: int) -> float:
    return round(cents / 100, 2)


def to_cents(amount: float, what: str = "amount") -> int:
    """A positive dollar amount with at most two decimals, in cents."""
    cents = round(amount * 100)
    if abs(amount * 100 - cents) > 1e-6:
        raise ToolError(f"{what} must have at most two decimals, got {amount}")
    if cents <= 0:
        raise ToolError(f"{what} must be positive, got {amount}")
    return cents
