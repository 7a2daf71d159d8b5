"""Held-out template families: only in the eval split, never in training (see ``families``).

They combine what training families do one at a time: buy then pay, move money then pay, change the
address then buy, and a spending question answered by SQL over the bank's ledger.
"""

from __future__ import annotations

import random

from specs.domains.apps.families import (
    BANK,
    BANK_SQL,
    COUNT_WORDS,
    SHOP,
    Draft,
    answer,
    call,
    customer,
    draft,
    me,
    new_address,
    no_new_txns,
    pick,
    sql,
)
from specs.domains.apps.world import NEW_ORDERS, NEW_TXNS, World, amount, usd

MONTHS = {"01": "January", "02": "February", "03": "March"}


def _product(rng: random.Random, w: World, qty: int) -> tuple[str, str, int] | None:
    """(id, name, price cents) of a random product with at least ``qty`` in stock."""
    pid, pname, price, stock = w.rows(
        "shop", "SELECT id, name, price_cents, stock FROM products ORDER BY id"
    )[rng.randrange(30)]
    return (str(pid), str(pname), int(price)) if int(stock) >= qty else None


def buy_and_pay(rng: random.Random, w: World) -> Draft | None:
    cid, name, email, addr = customer(rng, w)
    qty = rng.randint(1, 2)
    product = _product(rng, w, qty)
    if product is None:
        return None
    pid, pname, price = product
    chk, bal = w.accounts(email)["checking"]
    total, order_id = price * qty, w.last_order + 1
    if total > bal:
        return None
    text = pick(
        rng,
        (
            f"Buy {COUNT_WORDS[qty]} {pname} and pay for the order right away from my checking account.",
            f"I'd like {COUNT_WORDS[qty]} {pname}. Order it and pay the shop from my checking account.",
        ),
    )
    return draft(
        f"{me(name, email)} {text}",
        [SHOP, BANK],
        [
            sql(
                "shop.db",
                NEW_ORDERS.format(after=w.last_order),
                [[cid, "paid", addr, pid, qty, total]],
                "A paid order.",
            ),
            sql(
                "bank.db",
                NEW_TXNS.format(after=w.last_txn),
                [[chk, "bill_payment", -total, "ShopCo"]],
                "One payment to ShopCo.",
            ),
        ],
        [
            call(
                "shop",
                "place_order",
                {"customer_id": cid, "items": [{"product_id": pid, "quantity": qty}]},
                ["customer_id", "items"],
            ),
            call(
                "bank",
                "pay_bill",
                {"account_id": chk, "payee": "ShopCo", "amount": amount(total)},
                ["account_id", "payee", "amount"],
            ),
            call(
                "shop",
                "confirm_payment",
                {"order_id": order_id, "amount": amount(total), "bank_transaction_id": w.last_txn + 1},
            ),
        ],
        {"family": "buy_and_pay", "email": email, "product": pname, "quantity": qty},
    )


def move_then_pay(rng: random.Random, w: World) -> Draft | None:
    cid, name, email, _ = customer(rng, w)
    pending = w.pending_order(cid)
    if pending is None:
        return None
    order_id, _, total = pending
    acc = w.accounts(email)
    (chk, c_bal), (sav, s_bal) = acc["checking"], acc["savings"]
    cents = (total // 5000 + 1) * 5000
    if cents > s_bal or c_bal + cents < total:
        return None
    text = pick(
        rng,
        (
            f"Move {usd(cents)} from my savings to my checking, then pay my unpaid shop order from checking.",
            f"First transfer {usd(cents)} from savings into checking. After that, pay for the ShopCo order I still owe.",
        ),
    )
    return draft(
        f"{me(name, email)} {text}",
        [SHOP, BANK],
        [
            sql(
                "bank.db",
                NEW_TXNS.format(after=w.last_txn),
                [
                    [sav, "transfer_out", -cents, chk],
                    [chk, "transfer_in", cents, sav],
                    [chk, "bill_payment", -total, "ShopCo"],
                ],
                "The transfer, then the payment.",
            ),
            sql(
                "shop.db",
                f"SELECT status, paid_cents FROM orders WHERE id = {order_id}",
                [["paid", total]],
                "The order is paid.",
            ),
        ],
        [
            call(
                "bank",
                "transfer",
                {"from_account_id": sav, "to_account_id": chk, "amount": amount(cents)},
                ["from_account_id", "to_account_id", "amount"],
            ),
            call(
                "bank",
                "pay_bill",
                {"account_id": chk, "payee": "ShopCo", "amount": amount(total)},
                ["account_id", "payee", "amount"],
            ),
            call(
                "shop",
                "confirm_payment",
                {"order_id": order_id, "amount": amount(total), "bank_transaction_id": w.last_txn + 3},
            ),
        ],
        {"family": "move_then_pay", "email": email, "amount": amount(cents)},
    )


def address_then_buy(rng: random.Random, w: World) -> Draft | None:
    cid, name, email, _ = customer(rng, w)
    product = _product(rng, w, 1)
    if product is None:
        return None
    pid, pname, price = product
    address = new_address(rng)
    text = pick(
        rng,
        (
            f"I've just moved to {address}. Update my address with the shop, then order one {pname} to be shipped there.",
            f"My new home is {address}. Change my shop address and buy a {pname} delivered to the new place.",
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
                "The address is updated.",
            ),
            sql(
                "shop.db",
                NEW_ORDERS.format(after=w.last_order),
                [[cid, "pending_payment", address, pid, 1, price]],
                "One order to the new address.",
            ),
        ],
        [
            call("shop", "update_address", {"customer_id": cid, "address": address}),
            call(
                "shop",
                "place_order",
                {"customer_id": cid, "items": [{"product_id": pid, "quantity": 1}]},
                ["customer_id", "items"],
            ),
        ],
        {"family": "address_then_buy", "email": email, "address": address, "product": pname},
    )


SPENT = (
    "SELECT -SUM(t.amount_cents) / 100.0 FROM transactions t JOIN accounts a ON a.id = t.account_id "
    "JOIN holders h ON h.id = a.holder_id WHERE h.email = '{email}' AND t.kind = '{kind}' AND t.posted_on LIKE '2025-{month}-%'"
)


def spending_question(rng: random.Random, w: World) -> Draft | None:
    _, name, email, _ = customer(rng, w)
    month, kind = pick(rng, ("01", "02")), pick(rng, ("bill_payment", "card_purchase"))
    query = SPENT.format(email=email, kind=kind, month=month)
    spent = w.one("bank", query)[0]
    if spent is None:
        return None
    what = "on bill payments" if kind == "bill_payment" else "with card purchases"
    text = pick(
        rng,
        (
            f"How much did I spend {what} in {MONTHS[month]} 2025?",
            f"What was the total I paid {what} during {MONTHS[month]} 2025?",
        ),
    )
    return draft(
        f"{me(name, email)} {text} The bank's database has my transactions.",
        [BANK_SQL],
        [answer(round(float(spent), 2)), no_new_txns(w)],
        [call("bank_sql", "read_query", {"query": query}, [])],
        {"family": "spending_question", "query": query},
        question=True,
    )
