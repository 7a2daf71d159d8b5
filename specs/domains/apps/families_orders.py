"""Template families on existing orders, across servers and through SQL reads (see ``families``)."""

from __future__ import annotations

import random

from specs.domains.apps.families import (
    BANK,
    SHOP,
    SHOP_SQL,
    Draft,
    answer,
    call,
    customer,
    draft,
    me,
    no_new_orders,
    pick,
    sql,
)
from specs.domains.apps.world import NEW_ORDERS, NEW_TXNS, World, amount

COUPONS = ("SAVE10", "WELCOME5", "SPRING15")


def _restocked(w: World, order_id: int) -> list[list[object]]:
    """[product id, stock once the order's units are back] of an order's lines."""
    return [
        [r[0], int(r[1]) + int(r[2])]
        for r in w.rows(
            "shop",
            "SELECT p.id, p.stock, i.quantity FROM order_items i JOIN products p ON p.id = i.product_id "
            "WHERE i.order_id = ? ORDER BY p.id",
            order_id,
        )
    ]


def cancel_latest(rng: random.Random, w: World) -> Draft | None:
    cid, name, email, _ = customer(rng, w)
    order_id, status, _, paid = w.latest_order(cid)
    if status not in ("pending_payment", "paid"):
        return None
    credit = int(w.one("shop", "SELECT store_credit_cents FROM customers WHERE id = ?", cid)[0])
    stock = _restocked(w, order_id)
    ids = ", ".join(f"'{p}'" for p, _ in stock)
    text = pick(
        rng,
        (
            "Please cancel my most recent order.",
            "Cancel the latest order I placed; I don't need it anymore.",
            "I changed my mind about my last order. Cancel it, and any refund can go to store credit.",
        ),
    )
    return draft(
        f"{me(name, email)} {text}",
        [SHOP],
        [
            sql(
                "shop.db",
                f"SELECT o.status, c.store_credit_cents FROM orders o JOIN customers c ON c.id = o.customer_id "
                f"WHERE o.id = {order_id}",
                [["cancelled", credit + paid]],
                "The order is cancelled, refunded to store credit.",
            ),
            sql(
                "shop.db",
                f"SELECT id, stock FROM products WHERE id IN ({ids}) ORDER BY id",
                stock,
                "Its stock is back.",
            ),
        ],
        [call("shop", "cancel_order", {"order_id": order_id}, ["order_id"])],
        {"family": "cancel_latest", "email": email},
    )


def apply_coupon(rng: random.Random, w: World) -> Draft | None:
    cid, name, email, _ = customer(rng, w)
    pending = w.pending_order(cid)
    code = pick(rng, COUPONS)
    if pending is None:
        return None
    order_id, subtotal, _ = pending
    pct, off, minimum = w.one(
        "shop", "SELECT percent_off, amount_off_cents, min_total_cents FROM coupons WHERE code = ?", code
    )
    if subtotal < minimum:
        return None
    discount = subtotal * int(pct) // 100 + int(off)
    text = pick(
        rng,
        (
            f"Apply the coupon {code} to my order that is waiting for payment.",
            f"I have a coupon code, {code}. Put it on my unpaid order, please.",
            f"Use coupon {code} on the order I haven't paid yet.",
        ),
    )
    return draft(
        f"{me(name, email)} {text}",
        [SHOP],
        [
            sql(
                "shop.db",
                f"SELECT status, coupon, discount_cents, total_cents FROM orders WHERE id = {order_id}",
                [["pending_payment", code, discount, subtotal - discount]],
                "The coupon is on the order.",
            )
        ],
        [call("shop", "apply_coupon", {"order_id": order_id, "code": code})],
        {"family": "apply_coupon", "email": email, "code": code},
    )


def pay_order(rng: random.Random, w: World) -> Draft | None:
    cid, name, email, _ = customer(rng, w)
    pending = w.pending_order(cid)
    if pending is None:
        return None
    order_id, _, total = pending
    chk, bal = w.accounts(email)["checking"]
    if total > bal:
        return None
    text = pick(
        rng,
        (
            "Pay for my unpaid ShopCo order from my checking account.",
            "My shop order is still waiting for payment. Pay it from checking and make sure the shop marks it paid.",
            "Settle the order I haven't paid yet at the shop, using my checking account.",
        ),
    )
    return draft(
        f"{me(name, email)} {text}",
        [SHOP, BANK],
        [
            sql(
                "shop.db",
                f"SELECT status, paid_cents FROM orders WHERE id = {order_id}",
                [["paid", total]],
                "The shop has it paid.",
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
        {"family": "pay_order", "email": email},
    )


def cancel_refund_bank(rng: random.Random, w: World) -> Draft | None:
    cid, name, email, _ = customer(rng, w)
    order_id, status, _, paid = w.latest_order(cid)
    if status != "paid":
        return None
    kind = pick(rng, ("checking", "savings"))
    acc, _ = w.accounts(email)[kind]
    credit = int(w.one("shop", "SELECT store_credit_cents FROM customers WHERE id = ?", cid)[0])
    text = pick(
        rng,
        (
            f"Cancel my most recent order and refund it to my {kind} account at the bank.",
            f"Please cancel my last order. I want the money back in my bank {kind} account, not as store credit.",
            f"Cancel the newest order I placed and have the refund paid into my {kind} account.",
        ),
    )
    return draft(
        f"{me(name, email)} {text}",
        [SHOP, BANK],
        [
            sql(
                "shop.db",
                f"SELECT o.status, o.refund_to, o.refunded_cents, c.store_credit_cents FROM orders o "
                f"JOIN customers c ON c.id = o.customer_id WHERE o.id = {order_id}",
                [["cancelled", "bank", paid, credit]],
                "Cancelled with a bank refund.",
            ),
            sql(
                "bank.db",
                NEW_TXNS.format(after=w.last_txn),
                [[acc, "refund", paid, "ShopCo"]],
                "The refund reached the account.",
            ),
        ],
        [
            call("shop", "cancel_order", {"order_id": order_id, "refund_to": "bank"}),
            call(
                "bank",
                "receive_refund",
                {
                    "account_id": acc,
                    "merchant": "ShopCo",
                    "amount": amount(paid),
                    "reference": f"RF-{order_id}",
                },
            ),
        ],
        {"family": "cancel_refund_bank", "email": email, "kind": kind},
    )


def stock_question(rng: random.Random, w: World) -> Draft | None:
    category = pick(
        rng, [r[0] for r in w.rows("shop", "SELECT DISTINCT category FROM products ORDER BY category")]
    )
    if rng.random() < 0.5:
        query = f"SELECT SUM(stock) FROM products WHERE category = '{category}'"
        text = pick(
            rng,
            (
                f"How many units of {category} products does the shop have in stock in total?",
                f"Add up the stock of every product in the {category} category. What is the total?",
            ),
        )
    else:
        query = f"SELECT COUNT(*) FROM products WHERE category = '{category}' AND stock = 0"
        text = pick(
            rng,
            (
                f"How many products in the {category} category are out of stock?",
                f"Count the {category} products that have zero units left.",
            ),
        )
    value = int(w.one("shop", query)[0])
    return draft(
        f"{text} Look it up in the shop's database.",
        [SHOP_SQL],
        [answer(value), no_new_orders(w)],
        [call("shop_sql", "read_query", {"query": query}, [])],
        {"family": "stock_question", "query": query},
        question=True,
    )


BEST = (
    "SELECT i.product_id, SUM(i.quantity) AS units FROM order_items i JOIN products p ON p.id = i.product_id "
    "WHERE p.category = '{category}' GROUP BY i.product_id ORDER BY units DESC, i.product_id LIMIT 2"
)


def best_seller(rng: random.Random, w: World) -> Draft | None:
    cid, name, email, addr = customer(rng, w)
    category = pick(
        rng, [r[0] for r in w.rows("shop", "SELECT DISTINCT category FROM products ORDER BY category")]
    )
    top = w.rows("shop", BEST.format(category=category))
    if len(top) < 2 or top[0][1] == top[1][1]:
        return None
    pid = str(top[0][0])
    price, stock = w.one("shop", "SELECT price_cents, stock FROM products WHERE id = ?", pid)
    if int(stock) < 1:
        return None
    text = pick(
        rng,
        (
            f"Order one unit of the best-selling {category} product (most units sold across all orders).",
            f"Which {category} product has sold the most units? Buy one of it for me.",
        ),
    )
    return draft(
        f"{me(name, email)} {text} The shop's database can tell you the sales.",
        [SHOP_SQL, SHOP],
        [
            sql(
                "shop.db",
                NEW_ORDERS.format(after=w.last_order),
                [[cid, "pending_payment", addr, pid, 1, int(price)]],
                "One new order of the best seller.",
            )
        ],
        [
            call(
                "shop",
                "place_order",
                {"customer_id": cid, "items": [{"product_id": pid, "quantity": 1}]},
                ["customer_id", "items"],
            )
        ],
        {"family": "best_seller", "email": email, "category": category},
    )
