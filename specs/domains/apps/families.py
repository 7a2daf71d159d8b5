"""Template families of apps tasks: everyday requests to a shop and a bank, with their expected state.

A family draws one task from the seeded ``World``: the instruction (phrasings vary), the servers it
needs, the SQL verifiers of the end state (``apps.sql_state``), for questions also the number in the
reply, the reference calls of the tool reward, and ``_plan``: the family and the parameters the
scripted expert starts from (who the user is, amounts, names); ids and values that live in the
databases (account ids, order ids, prices, totals) are left for the expert to read from tool results.
A family returns ``None`` when the draw does not fit the seed (e.g. nothing to cancel); the caller
draws again.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from specs.domains.apps.world import NEW_ORDERS, NEW_TXNS, World

Draft = dict[str, Any]
Family = Callable[[random.Random, World], Draft | None]

ACT = "When you are done, reply with one short sentence saying what you did."
ASK = "End your reply with one sentence of the form: The answer is <number>."
SHOP, BANK = {"name": "shop"}, {"name": "bank"}
SQL_TOOLS = ["read_query", "list_tables", "describe_table"]
SHOP_SQL, BANK_SQL = {"name": "shop_sql", "tools": SQL_TOOLS}, {"name": "bank_sql", "tools": SQL_TOOLS}
PAYEES = ("PowerGrid Electric", "AquaCity Water", "Metro Mobile", "Streamly", "Northside Rentals")
STREETS = ("Willow Street", "Cedar Park Road", "Foundry Lane", "Juniper Avenue", "Canal Walk", "Rose Hill")
TOWNS = ("Riverton", "Eastbrook", "Fairhaven", "Northwood", "Lakeside", "Southport")
UNDO_ORDER = {
    "server": "shop",
    "tool": "place_order",
    "cleanup_func": "cancel_order",
    "cleanup_args": {"order_id": "$return -> get(structuredContent) -> get(order_id)"},
}
COUNT_WORDS = {1: "one", 2: "two", 3: "three"}
SEARCHES = (
    ("USB cable", "USB cables"),
    ("charger", "chargers"),
    ("USB drive", "USB drives"),
    ("mouse", "mice"),
    ("cable", "cables"),
    ("keyboard", "keyboards"),
)


def pick(rng: random.Random, options: tuple[Any, ...] | list[Any]) -> Any:
    return options[rng.randrange(len(options))]


def me(name: str, email: str) -> str:
    return f"I'm {name} ({email})."


def sql(db: str, query: str, rows: list[list[Any]], desc: str) -> dict[str, Any]:
    return {
        "func": "raw",
        "op": "apps.sql_state",
        "value": rows,
        "op_args": {"db": db, "query": query},
        "desc": desc,
    }


def answer(value: float) -> dict[str, Any]:
    return {
        "func": "number",
        "op": "approx",
        "value": value,
        "op_args": {"abs_tol": 0.005},
        "desc": "The number in the reply equals the answer.",
    }


def call(
    server: str, tool: str, arguments: dict[str, Any], required: list[str] | None = None
) -> dict[str, Any]:
    ref: dict[str, Any] = {"server": server, "tool": tool, "arguments": arguments}
    if required is not None:
        ref["required"] = required
    return ref


def no_new_txns(w: World) -> dict[str, Any]:
    return sql("bank.db", NEW_TXNS.format(after=w.last_txn), [], "No money moved.")


def no_new_orders(w: World) -> dict[str, Any]:
    return sql("shop.db", NEW_ORDERS.format(after=w.last_order), [], "No order was placed.")


def customer(rng: random.Random, w: World) -> tuple[str, str, str, str]:
    c: tuple[str, str, str, str] = pick(rng, w.customers())
    return c


def new_address(rng: random.Random) -> str:
    return f"{rng.randint(3, 199)} {pick(rng, STREETS)}, {pick(rng, TOWNS)}"


def draft(
    instruction: str,
    servers: list[dict[str, Any]],
    evaluators: list[dict[str, Any]],
    refs: list[dict[str, Any]],
    plan: dict[str, Any],
    question: bool = False,
) -> Draft:
    return {
        "instruction": instruction,
        "output_format": ASK if question else ACT,
        "mcp_servers": servers,
        "evaluators": evaluators,
        "reference_calls": refs,
        "_plan": plan,
    }


def update_address(rng: random.Random, w: World) -> Draft | None:
    cid, name, email, _ = customer(rng, w)
    address = new_address(rng)
    text = pick(
        rng,
        (
            f"I moved. My new address is {address}; please update it in my shop account.",
            f"Change my shipping address to {address}.",
            f"Update my address on file to {address}.",
        ),
    )
    return draft(
        f"{me(name, email)} {text}",
        [SHOP],
        [
            sql(
                "shop.db",
                f"SELECT address FROM customers WHERE id = '{cid}'",
                [[address]],
                "The address is the new one.",
            )
        ],
        [call("shop", "update_address", {"customer_id": cid, "address": address})],
        {"family": "update_address", "email": email, "address": address},
    )


def buy_cheapest(rng: random.Random, w: World) -> Draft | None:
    cid, name, email, addr = customer(rng, w)
    query, plural = pick(rng, SEARCHES)
    qty = rng.randint(1, 3)
    stocked = [p for p in w.matching_products(query) if p[3] > 0]
    cheapest = min(stocked, key=lambda p: (p[2], p[0]))
    if sum(p[2] == cheapest[2] for p in stocked) > 1 or cheapest[3] < qty:
        return None
    text = pick(
        rng,
        (
            f"Buy {COUNT_WORDS[qty]} of the cheapest {plural} you have in stock.",
            f"Order {COUNT_WORDS[qty]} units of your cheapest in-stock {query}.",
            f"I need {COUNT_WORDS[qty]} of the least expensive {plural} that are available. Please order them.",
        ),
    )
    d = draft(
        f"{me(name, email)} {text}",
        [SHOP],
        [
            sql(
                "shop.db",
                NEW_ORDERS.format(after=w.last_order),
                [[cid, "pending_payment", addr, cheapest[0], qty, cheapest[2] * qty]],
                "One new order of the cheapest matching product.",
            )
        ],
        [
            call(
                "shop",
                "place_order",
                {"customer_id": cid, "items": [{"product_id": cheapest[0], "quantity": qty}]},
                ["customer_id", "items"],
            )
        ],
        {"family": "buy_cheapest", "email": email, "query": query, "quantity": qty},
    )
    # MCP-Universe per-tool-call cleanup: each order placed is cancelled after the episode (after
    # scoring; the reset wipes the database anyway), exercising cleanups[].tool on a real server.
    d["cleanups"] = [UNDO_ORDER]
    return d
