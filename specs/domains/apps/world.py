"""The seeded state every apps task starts from, as the task generator reads it.

``World`` loads ``data/shop.sql`` and ``data/bank.sql`` (the very SQL ``apps.seed_db`` writes into
each environment) into in-memory SQLite databases, so a task's expected end state is computed
from the seed, independently of the servers' code. Money is in integer cents; ``usd`` shows it
the way an instruction says it.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from specs.domains.apps.hooks import seed_sql

NEW_TXNS = (
    "SELECT account_id, kind, amount_cents, counterparty FROM transactions WHERE id > {after} ORDER BY id"
)
NEW_ORDERS = (
    "SELECT o.customer_id, o.status, o.ship_address, i.product_id, i.quantity, o.total_cents FROM orders o "
    "JOIN order_items i ON i.order_id = o.id WHERE o.id > {after} ORDER BY o.id, i.product_id"
)


def usd(cents: int) -> str:
    """``5000`` -> ``$50``, ``8420`` -> ``$84.20``."""
    return f"${cents // 100}" if cents % 100 == 0 else f"${cents / 100:.2f}"


def amount(cents: int) -> int | float:
    """The tool argument for ``cents``: whole dollars as an int, else dollars with cents."""
    return cents // 100 if cents % 100 == 0 else round(cents / 100, 2)


class World:
    """Read access to the seed databases (``shop``, ``bank``)."""

    def __init__(self) -> None:
        self.shop = sqlite3.connect(":memory:")
        self.shop.executescript(seed_sql("shop"))
        self.bank = sqlite3.connect(":memory:")
        self.bank.executescript(seed_sql("bank"))
        self.last_order = int(self.shop.execute("SELECT MAX(id) FROM orders").fetchone()[0])
        self.last_txn = int(self.bank.execute("SELECT MAX(id) FROM transactions").fetchone()[0])

    def rows(self, db: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        conn = self.shop if db == "shop" else self.bank
        return [tuple(r) for r in conn.execute(sql, params).fetchall()]

    def one(self, db: str, sql: str, *params: Any) -> tuple[Any, ...]:
        rows = self.rows(db, sql, *params)
        if len(rows) != 1:
            raise ValueError(f"expected one row from {db}: {sql} {params}, got {len(rows)}")
        return rows[0]

    def customers(self) -> list[tuple[str, str, str, str]]:
        """(customer id, name, email, address) of every shop customer."""
        return [
            (r[0], r[1], r[2], r[3])
            for r in self.rows("shop", "SELECT id, name, email, address FROM customers ORDER BY id")
        ]

    def accounts(self, email: str) -> dict[str, tuple[str, int]]:
        """kind -> (account id, balance cents) of the bank holder with ``email``."""
        rows = self.rows(
            "bank",
            "SELECT a.kind, a.id, a.balance_cents FROM accounts a JOIN holders h ON h.id = a.holder_id "
            "WHERE h.email = ?",
            email,
        )
        return {kind: (acc, bal) for kind, acc, bal in rows}

    def latest_order(self, customer_id: str) -> tuple[int, str, int, int]:
        """(order id, status, total cents, paid cents) of the customer's newest order."""
        r = self.rows(
            "shop",
            "SELECT id, status, total_cents, paid_cents FROM orders WHERE customer_id = ? "
            "ORDER BY created_on DESC, id DESC LIMIT 1",
            customer_id,
        )[0]
        return int(r[0]), str(r[1]), int(r[2]), int(r[3])

    def pending_order(self, customer_id: str) -> tuple[int, int, int] | None:
        """(order id, subtotal cents, total cents) of the customer's one order awaiting payment."""
        rows = self.rows(
            "shop",
            "SELECT id, subtotal_cents, total_cents FROM orders WHERE customer_id = ? AND status = 'pending_payment'",
            customer_id,
        )
        return (int(rows[0][0]), int(rows[0][1]), int(rows[0][2])) if len(rows) == 1 else None

    def matching_products(self, query: str) -> list[tuple[str, str, int, int]]:
        """(id, name, price cents, stock) of products whose name or category holds every word of ``query``
        (the shop's search rule)."""
        words = query.lower().split()
        rows = self.rows("shop", "SELECT id, name, category, price_cents, stock FROM products ORDER BY id")
        return [(r[0], r[1], r[3], r[4]) for r in rows if all(w in f"{r[1]} {r[2]}".lower() for w in words)]
