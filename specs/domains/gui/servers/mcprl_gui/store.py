"""The inventory's data and its rules, shared by the web app (``web``) and the MCP server (``server``).

One SQLite file (seeded by the environment's prepare hook); one connection per operation, which is
one transaction: committed when it succeeds, rolled back when a rule refuses it (``Refused``, whose
message is what the user sees, in the page or as the tool's error). Every change is logged in
``changes`` with the way it came (``via``: ``web`` or ``api``). Money is stored in integer cents.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

Via = Literal["web", "api"]
SKU = re.compile(r"^[A-Z]{3}-\d{3}$")


class Refused(ValueError):
    """A business rule refused the operation; nothing was changed."""


def cents(price: str | float) -> int:
    """``"4.50"``, ``"$4.50"`` or ``4.5`` -> ``450``; a positive price with at most two decimals."""
    text = str(price).strip().lstrip("$").replace(",", "")
    if not re.fullmatch(r"\d+(\.\d{1,2})?", text):
        raise Refused(f"a price is a positive amount like 4.50, got {price!r}")
    value = round(float(text) * 100)
    if value <= 0:
        raise Refused(f"a price must be above zero, got {price!r}")
    return value


def whole(number: str | int, what: str) -> int:
    """A whole number (``"12"``, ``"-3"``, ``12``) or a ``Refused`` naming ``what``."""
    text = str(number).strip()
    if not re.fullmatch(r"[+-]?\d+", text):
        raise Refused(f"{what} must be a whole number, got {number!r}")
    return int(text)


def shown(row: sqlite3.Row) -> dict[str, Any]:
    """An item as both channels show it (price in dollars)."""
    return {
        "sku": row["sku"],
        "name": row["name"],
        "category": row["category"],
        "location": row["location"],
        "quantity": row["quantity"],
        "price": round(row["price_cents"] / 100, 2),
    }


class Store:
    """The inventory database at ``path``; it must exist (the environment's prepare seeds it)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        if not self.path.exists():
            raise Refused(f"the database {self.path} does not exist (the environment was not seeded)")
        conn = sqlite3.connect(self.path, timeout=10.0)
        conn.row_factory = sqlite3.Row
        try:
            with conn:  # commit on success, roll back on an exception
                yield conn
        finally:
            conn.close()

    # -- reads ---------------------------------------------------------------------------------

    def search(self, query: str = "") -> list[dict[str, Any]]:
        """Items whose SKU, name, category or location contains ``query`` (all when empty), by SKU."""
        like = f"%{query.strip()}%"
        with self.tx() as conn:
            rows = conn.execute(
                "SELECT * FROM items WHERE sku LIKE ?1 OR name LIKE ?1 OR category LIKE ?1 "
                "OR location LIKE ?1 ORDER BY sku",
                (like,),
            ).fetchall()
        return [shown(r) for r in rows]

    def item(self, sku: str) -> dict[str, Any]:
        with self.tx() as conn:
            return shown(self._item(conn, sku))

    def categories(self) -> list[str]:
        with self.tx() as conn:
            return [r[0] for r in conn.execute("SELECT DISTINCT category FROM items ORDER BY category")]

    def locations(self) -> list[dict[str, str]]:
        with self.tx() as conn:
            rows = conn.execute("SELECT code, description FROM locations ORDER BY code").fetchall()
        return [{"code": r["code"], "description": r["description"]} for r in rows]

    # -- changes -------------------------------------------------------------------------------

    def adjust(self, sku: str, change: str | int, reason: str, via: Via) -> dict[str, Any]:
        """Add ``change`` units (negative: take them out); never below zero; a reason is required."""
        delta, why = whole(change, "the change"), reason.strip()
        if delta == 0:
            raise Refused("the change must not be zero")
        if not why:
            raise Refused("a stock change needs a reason")
        with self.tx() as conn:
            row = self._item(conn, sku)
            quantity = row["quantity"] + delta
            if quantity < 0:
                raise Refused(f"{row['sku']} has {row['quantity']} in stock; cannot take out {-delta}")
            conn.execute("UPDATE items SET quantity = ? WHERE sku = ?", (quantity, row["sku"]))
            self._log(conn, row["sku"], "quantity", row["quantity"], quantity, why, via)
            return shown(self._item(conn, row["sku"]))

    def move(self, sku: str, location: str, via: Via) -> dict[str, Any]:
        """Put the item at another known location."""
        with self.tx() as conn:
            row, code = self._item(conn, sku), self._location(conn, location)
            if code == row["location"]:
                raise Refused(f"{row['sku']} is already at {code}")
            conn.execute("UPDATE items SET location = ? WHERE sku = ?", (code, row["sku"]))
            self._log(conn, row["sku"], "location", row["location"], code, "", via)
            return shown(self._item(conn, row["sku"]))

    def set_price(self, sku: str, price: str | float, via: Via) -> dict[str, Any]:
        value = cents(price)
        with self.tx() as conn:
            row = self._item(conn, sku)
            conn.execute("UPDATE items SET price_cents = ? WHERE sku = ?", (value, row["sku"]))
            self._log(conn, row["sku"], "price_cents", row["price_cents"], value, "", via)
            return shown(self._item(conn, row["sku"]))

    def add(self, fields: dict[str, str], via: Via) -> dict[str, Any]:
        """A new item from ``sku``, ``name``, ``category``, ``location``, ``quantity``, ``price``."""
        sku, name = fields.get("sku", "").strip().upper(), fields.get("name", "").strip()
        category = fields.get("category", "").strip()
        if not SKU.match(sku):
            raise Refused(f"a SKU looks like ABC-123, got {fields.get('sku', '')!r}")
        if not name or not category:
            raise Refused("a new item needs a name and a category")
        quantity, price = whole(fields.get("quantity", ""), "the quantity"), cents(fields.get("price", ""))
        if quantity < 0:
            raise Refused("the quantity cannot be negative")
        with self.tx() as conn:
            code = self._location(conn, fields.get("location", ""))
            if conn.execute("SELECT 1 FROM items WHERE sku = ? OR name = ?", (sku, name)).fetchone():
                raise Refused(f"an item with SKU {sku} or name {name!r} exists already")
            conn.execute(
                "INSERT INTO items VALUES (?, ?, ?, ?, ?, ?)", (sku, name, category, code, quantity, price)
            )
            self._log(conn, sku, "created", None, name, "", via)
            return shown(self._item(conn, sku))

    # -- helpers -------------------------------------------------------------------------------

    @staticmethod
    def _item(conn: sqlite3.Connection, sku: str) -> sqlite3.Row:
        row: sqlite3.Row | None = conn.execute(
            "SELECT * FROM items WHERE sku = ?", (str(sku).strip().upper(),)
        ).fetchone()
        if row is None:
            raise Refused(f"no item with SKU {sku!r}")
        return row

    @staticmethod
    def _location(conn: sqlite3.Connection, location: str) -> str:
        code = str(location).strip().upper()
        if conn.execute("SELECT 1 FROM locations WHERE code = ?", (code,)).fetchone() is None:
            known = ", ".join(r[0] for r in conn.execute("SELECT code FROM locations ORDER BY code"))
            raise Refused(f"no location {location!r} (known: {known})")
        return code

    @staticmethod
    def _log(
        conn: sqlite3.Connection, sku: str, field: str, old: Any, new: Any, reason: str, via: Via
    ) -> None:
        conn.execute(
            "INSERT INTO changes (sku, field, old, new, reason, via) VALUES (?, ?, ?, ?, ?, ?)",
            (sku, field, None if old is None else str(old), str(new), reason, via),
        )
