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

from specs.domains.apps.world import NEW_ORDERS, NEW_TXNS, World, amount, usd

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


def transfer(rng: random.Random, w: World) -> Draft | None:
    _, name, email, _ = customer(rng, w)
    acc = w.accounts(email)
    src, dst = ("checking", "savings") if rng.random() < 0.5 else ("savings", "checking")
    cents = rng.choice([rng.randint(2, 40) * 500, rng.randint(1000, 9000) * 10 + rng.randint(0, 9)])
    if cents > acc[src][1]:
        return None
    (s_id, s_bal), (d_id, d_bal) = acc[src], acc[dst]
    text = pick(
        rng,
        (
            f"Move {usd(cents)} from my {src} to my {dst}.",
            f"Please transfer {usd(cents)} from my {src} account into my {dst} account.",
            f"Can you put {usd(cents)} from {src} into {dst} for me?",
        ),
    )
    rows = sorted([[s_id, s_bal - cents], [d_id, d_bal + cents]])
    ids = ", ".join(f"'{i}'" for i, _ in rows)
    return draft(
        f"{me(name, email)} {text}",
        [BANK],
        [
            sql(
                "bank.db",
                f"SELECT id, balance_cents FROM accounts WHERE id IN ({ids}) ORDER BY id",
                rows,
                "Both balances moved by the amount.",
            ),
            sql(
                "bank.db",
                NEW_TXNS.format(after=w.last_txn),
                [[s_id, "transfer_out", -cents, d_id], [d_id, "transfer_in", cents, s_id]],
                "One transfer, nothing else.",
            ),
        ],
        [
            call(
                "bank",
                "transfer",
                {"from_account_id": s_id, "to_account_id": d_id, "amount": amount(cents)},
                ["from_account_id", "to_account_id", "amount"],
            )
        ],
        {"family": "transfer", "email": email, "from": src, "to": dst, "amount": amount(cents)},
    )


def pay_bill(rng: random.Random, w: World) -> Draft | None:
    _, name, email, _ = customer(rng, w)
    chk, bal = w.accounts(email)["checking"]
    payee, cents = pick(rng, PAYEES), rng.randint(1500, 20000)
    if cents > bal:
        return None
    text = pick(
        rng,
        (
            f"Pay my {payee} bill of {usd(cents)} from my checking account.",
            f"I owe {payee} {usd(cents)}. Please pay it from checking.",
            f"Send a bill payment of {usd(cents)} to {payee} out of my checking account.",
        ),
    )
    return draft(
        f"{me(name, email)} {text}",
        [BANK],
        [
            sql(
                "bank.db",
                NEW_TXNS.format(after=w.last_txn),
                [[chk, "bill_payment", -cents, payee]],
                "One bill payment.",
            ),
            sql(
                "bank.db",
                f"SELECT balance_cents FROM accounts WHERE id = '{chk}'",
                [[bal - cents]],
                "Checking paid it.",
            ),
        ],
        [
            call(
                "bank",
                "pay_bill",
                {"account_id": chk, "payee": payee, "amount": amount(cents)},
                ["account_id", "payee", "amount"],
            )
        ],
        {"family": "pay_bill", "email": email, "payee": payee, "amount": amount(cents)},
    )


def freeze_card(rng: random.Random, w: World) -> Draft | None:
    _, name, email, _ = customer(rng, w)
    cards = w.rows(
        "bank",
        "SELECT c.id, c.last4 FROM cards c JOIN accounts a ON a.id = c.account_id "
        "JOIN holders h ON h.id = a.holder_id WHERE h.email = ? ORDER BY c.id",
        email,
    )
    card_id, last4 = pick(rng, cards)
    text = pick(
        rng,
        (
            f"I lost my card ending in {last4}. Please freeze it.",
            f"My card ending {last4} was stolen, freeze it right away.",
            f"Freeze my card that ends in {last4}; I can't find it.",
        ),
    )
    ids = ", ".join(f"'{c}'" for c, _ in cards)
    return draft(
        f"{me(name, email)} {text}",
        [BANK],
        [
            sql(
                "bank.db",
                f"SELECT id, status FROM cards WHERE id IN ({ids}) ORDER BY id",
                [[c, "frozen" if c == card_id else "active"] for c, _ in cards],
                "Only that card is frozen.",
            )
        ],
        [call("bank", "freeze_card", {"card_id": card_id})],
        {"family": "freeze_card", "email": email, "last4": last4},
    )


def balance(rng: random.Random, w: World) -> Draft | None:
    _, name, email, _ = customer(rng, w)
    kind = pick(rng, ("checking", "savings"))
    _, bal = w.accounts(email)[kind]
    text = pick(
        rng,
        (
            f"What is the balance of my {kind} account?",
            f"How much money is in my {kind} account right now?",
            f"Tell me my current {kind} balance.",
        ),
    )
    return draft(
        f"{me(name, email)} {text}",
        [BANK],
        [answer(bal / 100), no_new_txns(w)],
        [],
        {"family": "balance", "email": email, "kind": kind},
        question=True,
    )


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
