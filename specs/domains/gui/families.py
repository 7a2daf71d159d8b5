"""Template families of gui tasks: requests to the warehouse inventory, each with its expected state.

Every task offers both ways in (the browser and the inventory's own tools) and says where the web
app is; which way to take is the agent's choice. Some families are solvable only through the GUI
(``set_price``, ``add_item``: the MCP server has no tool for them), the others both ways, in fewer
steps through the tools. A family draws one task from the seed (``World``): the instruction, SQL
verifiers of the end state (``apps.sql_state`` on ``inventory.db``: the item's row and the exact
log of changes, so "nothing else changed" is checked too), the number in the reply for questions,
the reference calls (through the tools where one exists), and ``_plan`` for the scripted experts.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable
from typing import Any

from specs.domains.apps.families import answer, call, pick, sql
from specs.domains.gui.hooks import DB, seed_sql

Draft = dict[str, Any]
URL = "http://127.0.0.1:8000/"
WAYS = (
    f"The inventory web app is at {URL} (open it in the browser); the inventory server's tools "
    "reach the same data."
)
ACT = "When you are done, reply with one short sentence saying what you did."
ASK = "End your reply with one sentence of the form: The answer is <number>."
BROWSER_TOOLS = [
    "browser_navigate",
    "browser_navigate_back",
    "browser_snapshot",
    "browser_take_screenshot",
    "browser_click",
    "browser_type",
    "browser_fill_form",
]
"""What of @playwright/mcp's 25 tools a task shows: enough for forms (the full list is ~5k tokens)."""
SERVERS = [{"name": "browser", "tools": BROWSER_TOOLS}, {"name": "inventory"}]
CHANGES = "SELECT sku, field, old, new, reason FROM changes ORDER BY id"
REASONS = ("delivery", "supplier delivery", "stock count correction", "returned by customer")
WRITE_OFFS = ("damaged", "expired", "lost in stock count")
NEW_ITEMS = (
    ("Coach bolt M10", "Fasteners"),
    ("Junction box", "Electrical"),
    ("Pipe clip 15mm", "Plumbing"),
    ("Wood chisel 12mm", "Tools"),
    ("Primer 1L", "Paint"),
    ("Wall plug 6mm", "Fasteners"),
    ("Fuse 13A", "Electrical"),
    ("Stop valve 15mm", "Plumbing"),
)


class World:
    """The seed inventory (the very SQL ``gui.seed_db`` writes), read in memory."""

    def __init__(self) -> None:
        self.db = sqlite3.connect(":memory:")
        self.db.executescript(seed_sql())

    def items(self) -> list[tuple[str, str, str, str, int, int]]:
        """(sku, name, category, location, quantity, price_cents) of every item, by SKU."""
        return [tuple(r) for r in self.db.execute("SELECT * FROM items ORDER BY sku")]

    def locations(self) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT code FROM locations ORDER BY code")]


Family = Callable[[random.Random, World], Draft | None]


def draft(
    text: str, evaluators: list[dict[str, Any]], refs: list[dict[str, Any]], plan: dict[str, Any]
) -> Draft:
    return {
        "instruction": f"{text} {WAYS}",
        "output_format": ASK if plan["family"].endswith("question") else ACT,
        "mcp_servers": SERVERS,
        "evaluators": evaluators,
        "reference_calls": refs,
        "_plan": plan,
    }


def item_is(sku: str, row: tuple[Any, ...], desc: str) -> dict[str, Any]:
    query = f"SELECT sku, name, category, location, quantity, price_cents FROM items WHERE sku = '{sku}'"
    return sql(DB, query, [list(row)], desc)


def changes(rows: list[list[Any]], desc: str) -> dict[str, Any]:
    return sql(DB, CHANGES, rows, desc)


def restock(rng: random.Random, w: World) -> Draft | None:
    sku, name, cat, loc, qty, price = pick(rng, w.items())
    n, reason = rng.randint(5, 60), pick(rng, REASONS)
    text = pick(
        rng,
        (
            f'We just received {n} units of {name}. Record them in stock with the reason "{reason}".',
            f'Add {n} units of {name} to the inventory (reason: "{reason}").',
        ),
    )
    return draft(
        text,
        [
            item_is(sku, (sku, name, cat, loc, qty + n, price), f"{sku} has {qty + n} in stock."),
            changes([[sku, "quantity", str(qty), str(qty + n), reason]], "One stock change, nothing else."),
        ],
        [call("inventory", "adjust_stock", {"sku": sku, "change": n, "reason": reason})],
        {"family": "restock", "name": name, "change": n, "reason": reason},
    )


def write_off(rng: random.Random, w: World) -> Draft | None:
    sku, name, cat, loc, qty, price = pick(rng, w.items())
    if qty < 2:
        return None
    n, reason = rng.randint(1, min(qty, 12)), pick(rng, WRITE_OFFS)
    text = f'{n} units of {name} are {reason}. Take them out of stock with the reason "{reason}".'
    return draft(
        text,
        [
            item_is(sku, (sku, name, cat, loc, qty - n, price), f"{sku} has {qty - n} in stock."),
            changes([[sku, "quantity", str(qty), str(qty - n), reason]], "One stock change, nothing else."),
        ],
        [call("inventory", "adjust_stock", {"sku": sku, "change": -n, "reason": reason})],
        {"family": "write_off", "name": name, "change": -n, "reason": reason},
    )


def relocate(rng: random.Random, w: World) -> Draft | None:
    sku, name, cat, loc, qty, price = pick(rng, w.items())
    to = pick(rng, [c for c in w.locations() if c != loc])
    text = pick(rng, (f"Move {name} to location {to}.", f"{name} now lives at {to}: update its location."))
    return draft(
        text,
        [
            item_is(sku, (sku, name, cat, to, qty, price), f"{sku} is at {to}."),
            changes([[sku, "location", loc, to, ""]], "One move, nothing else."),
        ],
        [call("inventory", "move_item", {"sku": sku, "location": to})],
        {"family": "relocate", "name": name, "location": to},
    )


def stock_question(rng: random.Random, w: World) -> Draft | None:
    sku, name, *_, qty, _price = pick(rng, w.items())
    text = pick(rng, (f"How many units of {name} are in stock?", f"What is the stock level of {name}?"))
    return draft(
        text,
        [answer(qty), changes([], "Nothing changed.")],
        [call("inventory", "get_item", {"sku": sku})],
        {"family": "stock_question", "name": name},
    )


def set_price(rng: random.Random, w: World) -> Draft | None:
    sku, name, cat, loc, qty, price = pick(rng, w.items())
    new = price + pick(rng, (-1, 1)) * rng.randint(1, max(1, price // 4))
    if new <= 0 or new == price:
        return None
    text = pick(
        rng, (f"Change the price of {name} to ${new / 100:.2f}.", f"{name} now costs ${new / 100:.2f}.")
    )
    return draft(
        text,
        [
            item_is(sku, (sku, name, cat, loc, qty, new), f"{sku} costs {new} cents."),
            changes([[sku, "price_cents", str(price), str(new), ""]], "One price change, nothing else."),
        ],
        [],  # no tool sets a price: the GUI only
        {"family": "set_price", "name": name, "price": f"{new / 100:.2f}"},
    )


def add_item(rng: random.Random, w: World) -> Draft | None:
    name, cat = pick(rng, NEW_ITEMS)
    prefix = {"Fasteners": "FAS", "Electrical": "ELE", "Plumbing": "PLU", "Tools": "TOO", "Paint": "PAI"}[cat]
    sku, loc = f"{prefix}-{rng.randint(200, 999)}", pick(rng, w.locations())
    qty, price = rng.randint(0, 80), rng.randint(1, 60) * 25
    if any(i[0] == sku for i in w.items()):
        return None
    text = (
        f"Add a new item to the inventory: SKU {sku}, name {name}, category {cat}, location {loc}, "
        f"quantity {qty}, price ${price / 100:.2f}."
    )
    return draft(
        text,
        [
            item_is(sku, (sku, name, cat, loc, qty, price), f"{sku} exists as asked."),
            changes([[sku, "created", None, name, ""]], "One item added, nothing else."),
        ],
        [],  # no tool adds an item: the GUI only
        {
            "family": "add_item",
            "fields": {
                "sku": sku,
                "name": name,
                "category": cat,
                "location": loc,
                "quantity": str(qty),
                "price": f"{price / 100:.2f}",
            },
        },
    )


def price_and_restock(rng: random.Random, w: World) -> Draft | None:
    """Held out: one step only the GUI can do, one the tools do faster, on one item."""
    sku, name, cat, loc, qty, price = pick(rng, w.items())
    new, n = price + rng.randint(1, 200), rng.randint(5, 40)
    text = (
        f'We received {n} units of {name} (reason "delivery"), and its price goes up to '
        f"${new / 100:.2f}. Record both."
    )
    return draft(
        text,
        [
            item_is(sku, (sku, name, cat, loc, qty + n, new), f"{sku}: {qty + n} in stock at {new} cents."),
            sql(
                DB,
                "SELECT sku, field, old, new FROM changes ORDER BY sku, field",
                [[sku, "price_cents", str(price), str(new)], [sku, "quantity", str(qty), str(qty + n)]],
                "One price change and one stock change, nothing else.",
            ),
        ],
        [call("inventory", "adjust_stock", {"sku": sku, "change": n, "reason": "delivery"})],
        {
            "family": "price_and_restock",
            "name": name,
            "change": n,
            "reason": "delivery",
            "price": f"{new / 100:.2f}",
        },
    )


def restock_and_move(rng: random.Random, w: World) -> Draft | None:
    """Held out: two changes to one item, both possible either way."""
    sku, name, cat, loc, qty, price = pick(rng, w.items())
    to, n = pick(rng, [c for c in w.locations() if c != loc]), rng.randint(5, 40)
    text = f'Put the {n} new units of {name} into stock (reason "delivery") and move the item to {to}.'
    return draft(
        text,
        [
            item_is(sku, (sku, name, cat, to, qty + n, price), f"{sku}: {qty + n} in stock at {to}."),
            sql(
                DB,
                "SELECT sku, field, old, new FROM changes ORDER BY sku, field",
                [[sku, "location", loc, to], [sku, "quantity", str(qty), str(qty + n)]],
                "One move and one stock change, nothing else.",
            ),
        ],
        [
            call("inventory", "adjust_stock", {"sku": sku, "change": n, "reason": "delivery"}),
            call("inventory", "move_item", {"sku": sku, "location": to}),
        ],
        {"family": "restock_and_move", "name": name, "change": n, "reason": "delivery", "location": to},
    )
