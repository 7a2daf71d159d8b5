"""The apps domain's scripted expert, for warm-start demonstrations and the solvability test.

``respond(task, conversation)`` replays a per-family script (a generator of tool calls) against the
tool results seen so far in ``conversation`` and returns the next assistant message: one tool call,
or the final answer once the script ends. The script starts from the task's ``_plan`` (who the user
is, amounts, names, a SQL query for a question) and reads every id and value that lives in the
databases (account ids, order ids, cheapest product, amount due, transaction id, balances) from the
real servers' responses: it never knows the state offline. A tool error ends the episode with a
reply that says what failed.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable, Generator
from typing import Any

from specs.domains.scripts import Call, Script, respond_with


class ToolFailed(Exception):
    """A tool answered with something that is not a result (an error message)."""


def _parse(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    try:
        return ast.literal_eval(text)  # mcp-server-sqlite prints Python reprs of its rows
    except (ValueError, SyntaxError):
        raise ToolFailed(f"a tool answered {text.strip()[:300]}") from None


def _money(x: float) -> str:
    return f"${x:,.2f}"


def _scalar(rows: Any) -> Any:
    if not isinstance(rows, list) or not rows or not isinstance(rows[0], dict):
        raise ToolFailed(f"expected rows from read_query, got {rows!r}")
    return next(iter(rows[0].values()))


def _ids(accounts: dict[str, Any]) -> dict[str, str]:
    return {a["kind"]: a["account_id"] for a in accounts["accounts"]}


def transfer(p: dict[str, Any]) -> Script:
    ids = _ids((yield "bank__list_accounts", {"email": p["email"]}, "I need the ids of the two accounts."))
    args = {"from_account_id": ids[p["from"]], "to_account_id": ids[p["to"]], "amount": p["amount"]}
    r = yield "bank__transfer", args, "Now the transfer between the user's accounts."
    return f"I moved {_money(r['amount'])} from your {p['from']} to your {p['to']} account."


def pay_bill(p: dict[str, Any]) -> Script:
    ids = _ids((yield "bank__list_accounts", {"email": p["email"]}, "I need the checking account id."))
    args = {"account_id": ids["checking"], "payee": p["payee"], "amount": p["amount"]}
    r = yield "bank__pay_bill", args, "Pay the bill from checking."
    return f"I paid {_money(-r['amount'])} to {p['payee']} from your checking account (transaction {r['transaction_id']})."


def freeze_card(p: dict[str, Any]) -> Script:
    cards = yield "bank__list_cards", {"email": p["email"]}, "Find the card by its last four digits."
    card = next(c for c in cards["cards"] if c["last4"] == p["last4"])
    yield "bank__freeze_card", {"card_id": card["card_id"]}, "Freeze that card."
    return f"Your card ending in {p['last4']} is now frozen."


def balance(p: dict[str, Any]) -> Script:
    accounts = yield "bank__list_accounts", {"email": p["email"]}, "The balances are in the account list."
    value = next(a["balance"] for a in accounts["accounts"] if a["kind"] == p["kind"])
    return f"Your {p['kind']} account holds {_money(value)}. The answer is {value:.2f}."


def _customer(p: dict[str, Any]) -> Generator[Call, Any, dict[str, Any]]:
    c: dict[str, Any] = yield "shop__get_customer", {"email": p["email"]}, "First, the user's customer id."
    return c


def update_address(p: dict[str, Any]) -> Script:
    c = yield from _customer(p)
    args = {"customer_id": c["customer_id"], "address": p["address"]}
    yield "shop__update_address", args, "Update the address."
    return f"Your shipping address is now {p['address']}."


def _buy(cid: str, product_id: str, quantity: int) -> Generator[Call, Any, dict[str, Any]]:
    args = {"customer_id": cid, "items": [{"product_id": product_id, "quantity": quantity}]}
    order: dict[str, Any] = yield "shop__place_order", args, "Place the order."
    return order


def buy_cheapest(p: dict[str, Any]) -> Script:
    c = yield from _customer(p)
    found = yield (
        "shop__search_products",
        {"query": p["query"], "in_stock_only": True},
        "Search what is in stock.",
    )
    cheapest = min(found["products"], key=lambda x: (x["price"], x["product_id"]))
    order = yield from _buy(c["customer_id"], cheapest["product_id"], p["quantity"])
    return f"I ordered {p['quantity']} x {cheapest['name']} (order {order['order_id']}, total {_money(order['total'])})."


def _latest(p: dict[str, Any], status: str = "") -> Generator[Call, Any, dict[str, Any]]:
    c = yield from _customer(p)
    args = (
        {"customer_id": c["customer_id"], "status": status} if status else {"customer_id": c["customer_id"]}
    )
    orders = yield "shop__list_orders", args, "List the user's orders (newest first)."
    if not orders["orders"]:
        raise ToolFailed(f"no {status or ''} order found".replace("  ", " "))
    latest: dict[str, Any] = orders["orders"][0]
    return latest


def cancel_latest(p: dict[str, Any]) -> Script:
    order = yield from _latest(p)
    r = yield "shop__cancel_order", {"order_id": order["order_id"]}, "Cancel the newest order."
    return f"Order {order['order_id']} is cancelled; {_money(r['refund_amount'])} went to your store credit."


def apply_coupon(p: dict[str, Any]) -> Script:
    order = yield from _latest(p, "pending_payment")
    r = yield "shop__apply_coupon", {"order_id": order["order_id"], "code": p["code"]}, "Apply the coupon."
    return f"Coupon {p['code']} is on order {order['order_id']}; the total is now {_money(r['total'])}."


def _pay(p: dict[str, Any], order: dict[str, Any]) -> Generator[Call, Any, str]:
    ids = _ids((yield "bank__list_accounts", {"email": p["email"]}, "I need the checking account id."))
    due, order_id = order["amount_due"], order["order_id"]
    args = {"account_id": ids["checking"], "payee": "ShopCo", "amount": due, "reference": f"order {order_id}"}
    txn = yield "bank__pay_bill", args, "Pay ShopCo the amount due."
    confirm = {"order_id": order_id, "amount": due, "bank_transaction_id": txn["transaction_id"]}
    yield "shop__confirm_payment", confirm, "Tell the shop about the payment."
    return (
        f"I paid {_money(due)} for order {order_id} from your checking account and the shop marked it paid."
    )


def pay_order(p: dict[str, Any]) -> Script:
    order = yield from _latest(p, "pending_payment")
    return (yield from _pay(p, order))


def cancel_refund_bank(p: dict[str, Any]) -> Script:
    order = yield from _latest(p)
    r = yield (
        "shop__cancel_order",
        {"order_id": order["order_id"], "refund_to": "bank"},
        "Cancel with a bank refund.",
    )
    ids = _ids((yield "bank__list_accounts", {"email": p["email"]}, "Find the account for the refund."))
    args = {
        "account_id": ids[p["kind"]],
        "merchant": r["refund_merchant"],
        "amount": r["refund_amount"],
        "reference": r["refund_reference"],
    }
    yield "bank__receive_refund", args, "Credit the refund to the bank account."
    return f"Order {order['order_id']} is cancelled and {_money(r['refund_amount'])} was refunded to your {p['kind']} account."


def question(server: str) -> Callable[[dict[str, Any]], Script]:
    def script(p: dict[str, Any]) -> Script:
        rows = yield f"{server}__read_query", {"query": p["query"]}, "A SQL query answers this."
        value = _scalar(rows)
        return f"The database says {value}. The answer is {value}."

    return script


BEST = (
    "SELECT i.product_id, SUM(i.quantity) AS units FROM order_items i JOIN products p ON p.id = i.product_id "
    "WHERE p.category = '{category}' GROUP BY i.product_id ORDER BY units DESC LIMIT 1"
)


def best_seller(p: dict[str, Any]) -> Script:
    rows = yield (
        "shop_sql__read_query",
        {"query": BEST.format(category=p["category"])},
        "Find the best seller.",
    )
    product_id = str(_scalar(rows))
    c = yield from _customer(p)
    order = yield from _buy(c["customer_id"], product_id, 1)
    return f"The best seller is {product_id}; I ordered one (order {order['order_id']})."


def _by_name(p: dict[str, Any]) -> Generator[Call, Any, dict[str, Any]]:
    found = yield "shop__search_products", {"query": p["product"]}, "Find the product's id."
    product: dict[str, Any] = next(x for x in found["products"] if x["name"] == p["product"])
    return product


def buy_and_pay(p: dict[str, Any]) -> Script:
    c = yield from _customer(p)
    product = yield from _by_name(p)
    order = yield from _buy(c["customer_id"], product["product_id"], p["quantity"])
    return (yield from _pay(p, order))


def move_then_pay(p: dict[str, Any]) -> Script:
    ids = _ids((yield "bank__list_accounts", {"email": p["email"]}, "I need the account ids."))
    args = {"from_account_id": ids["savings"], "to_account_id": ids["checking"], "amount": p["amount"]}
    yield "bank__transfer", args, "Move the money to checking first."
    order = yield from _latest(p, "pending_payment")
    paid = yield from _pay(p, order)
    return f"I moved {_money(p['amount'])} to checking. {paid}"


def address_then_buy(p: dict[str, Any]) -> Script:
    c = yield from _customer(p)
    yield (
        "shop__update_address",
        {"customer_id": c["customer_id"], "address": p["address"]},
        "Update the address.",
    )
    product = yield from _by_name(p)
    order = yield from _buy(c["customer_id"], product["product_id"], 1)
    return f"Your address is updated and order {order['order_id']} ships to {order['ship_address']}."


SCRIPTS: dict[str, Callable[[dict[str, Any]], Script]] = {
    "transfer": transfer,
    "pay_bill": pay_bill,
    "freeze_card": freeze_card,
    "balance": balance,
    "update_address": update_address,
    "buy_cheapest": buy_cheapest,
    "cancel_latest": cancel_latest,
    "apply_coupon": apply_coupon,
    "pay_order": pay_order,
    "cancel_refund_bank": cancel_refund_bank,
    "stock_question": question("shop_sql"),
    "best_seller": best_seller,
    "buy_and_pay": buy_and_pay,
    "move_then_pay": move_then_pay,
    "address_then_buy": address_then_buy,
    "spending_question": question("bank_sql"),
}


def respond(task: Any, conversation: str) -> str:
    """The next assistant message for ``task`` given the conversation rendered so far."""
    plan = task.private.get("_plan")
    if not isinstance(plan, dict) or plan.get("family") not in SCRIPTS:
        raise ValueError(
            f"task {task.instance_id}: the apps expert needs a private '_plan' with a known family"
        )
    return respond_with(SCRIPTS[plan["family"]](plan), task, conversation, _parse, ToolFailed)
