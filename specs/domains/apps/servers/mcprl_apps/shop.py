"""The shop: a product catalogue, customers and their orders, in one SQLite file.

    python -m mcprl_apps.shop --db shop.db

Tools (read-only ones carry ``readOnlyHint``): ``search_products``, ``get_product``,
``get_customer``, ``list_orders``, ``get_order``, ``place_order``, ``apply_coupon``,
``confirm_payment``, ``cancel_order``, ``update_address``. Rules: an order takes stock when placed
(all lines or none) and returns it when cancelled; only an order awaiting payment takes a coupon or
a payment, and the payment must be exactly the amount due; shipped and delivered orders cannot be
cancelled; a cancelled paid order is refunded to store credit or, with ``refund_to="bank"``, by a
refund reference the customer's bank credits (``RF-<order id>``).
"""

from __future__ import annotations

import sqlite3
from typing import Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from mcprl_apps.db import Database, db_path_from_args, dollars, one, setting

READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITE = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)
IDEMPOTENT = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
DESTRUCTIVE = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False
)
CANCELLABLE = ("pending_payment", "paid")


class OrderLine(BaseModel):
    product_id: str = Field(description="Product id, e.g. P201")
    quantity: int = Field(ge=1, le=10, description="How many units (1-10)")


def _product(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "product_id": row["id"],
        "name": row["name"],
        "category": row["category"],
        "price": dollars(row["price_cents"]),
        "stock": row["stock"],
    }


def _customer_row(conn: sqlite3.Connection, customer_id: str) -> sqlite3.Row:
    row: sqlite3.Row | None = one(conn, "SELECT * FROM customers WHERE id = ?", customer_id)
    if row is None:
        raise ToolError(f"no customer with id {customer_id!r}")
    return row


def _order_row(conn: sqlite3.Connection, order_id: int) -> sqlite3.Row:
    row: sqlite3.Row | None = one(conn, "SELECT * FROM orders WHERE id = ?", order_id)
    if row is None:
        raise ToolError(f"no order with id {order_id}")
    return row


def _order(conn: sqlite3.Connection, row: sqlite3.Row) -> dict[str, Any]:
    lines = conn.execute(
        "SELECT i.product_id, p.name, i.quantity, i.unit_price_cents FROM order_items i "
        "JOIN products p ON p.id = i.product_id WHERE i.order_id = ? ORDER BY i.product_id",
        (row["id"],),
    ).fetchall()
    return {
        "order_id": row["id"],
        "customer_id": row["customer_id"],
        "status": row["status"],
        "created_on": row["created_on"],
        "ship_address": row["ship_address"],
        "items": [
            {"product_id": r[0], "name": r[1], "quantity": r[2], "unit_price": dollars(r[3])} for r in lines
        ],
        "subtotal": dollars(row["subtotal_cents"]),
        "coupon": row["coupon"],
        "discount": dollars(row["discount_cents"]),
        "total": dollars(row["total_cents"]),
        "amount_due": dollars(row["total_cents"] - row["paid_cents"]),
        "refunded": dollars(row["refunded_cents"]),
    }


def build(db: Database) -> MCPServer:
    """The shop server over ``db``."""
    app = MCPServer("shop", instructions="An online electronics shop (ShopCo). Prices are in dollars.")

    @app.tool(annotations=READ)
    def search_products(
        query: str = "", category: str = "", max_price: float | None = None, in_stock_only: bool = False
    ) -> dict[str, Any]:
        """Find products whose name or category contains every word of ``query`` (case-insensitive)."""
        words = query.lower().split()
        with db.tx() as conn:
            rows = conn.execute("SELECT * FROM products ORDER BY id").fetchall()
        found = [
            _product(r)
            for r in rows
            if all(w in f"{r['name']} {r['category']}".lower() for w in words)
            and (not category or r["category"] == category.lower())
            and (max_price is None or r["price_cents"] <= round(max_price * 100))
            and (not in_stock_only or r["stock"] > 0)
        ]
        return {"count": len(found), "products": found}

    @app.tool(annotations=READ)
    def get_product(product_id: str) -> dict[str, Any]:
        """One product by id."""
        with db.tx() as conn:
            row = one(conn, "SELECT * FROM products WHERE id = ?", product_id)
        if row is None:
            raise ToolError(f"no product with id {product_id!r}")
        return _product(row)

    @app.tool(annotations=READ)
    def get_customer(email: str) -> dict[str, Any]:
        """A customer's id, name, shipping address and store credit, by email."""
        with db.tx() as conn:
            row = one(conn, "SELECT * FROM customers WHERE lower(email) = lower(?)", email.strip())
        if row is None:
            raise ToolError(f"no customer with email {email!r}")
        return {
            "customer_id": row["id"],
            "name": row["name"],
            "email": row["email"],
            "address": row["address"],
            "store_credit": dollars(row["store_credit_cents"]),
        }

    @app.tool(annotations=READ)
    def list_orders(customer_id: str, status: str = "") -> dict[str, Any]:
        """A customer's orders, newest first, optionally only those with ``status``."""
        with db.tx() as conn:
            _customer_row(conn, customer_id)
            rows = conn.execute(
                "SELECT * FROM orders WHERE customer_id = ? AND (? = '' OR status = ?) "
                "ORDER BY created_on DESC, id DESC",
                (customer_id, status, status),
            ).fetchall()
            return {"orders": [_order(conn, r) for r in rows]}

    @app.tool(annotations=READ)
    def get_order(order_id: int) -> dict[str, Any]:
        """One order with its lines and the amount still due."""
        with db.tx() as conn:
            return _order(conn, _order_row(conn, order_id))

    @app.tool(annotations=WRITE)
    def place_order(customer_id: str, items: list[OrderLine], ship_address: str = "") -> dict[str, Any]:
        """Order products for a customer; it waits for payment. Ships to the customer's address
        unless ``ship_address`` is given."""
        if not items:
            raise ToolError("an order needs at least one item")
        if len({i.product_id for i in items}) != len(items):
            raise ToolError("each product may appear once in an order; set its quantity instead")
        with db.tx() as conn:
            customer = _customer_row(conn, customer_id)
            subtotal = 0
            for line in items:
                p = one(conn, "SELECT * FROM products WHERE id = ?", line.product_id)
                if p is None:
                    raise ToolError(f"no product with id {line.product_id!r}")
                if p["stock"] < line.quantity:
                    raise ToolError(
                        f"{p['name']} ({p['id']}): only {p['stock']} in stock, {line.quantity} asked"
                    )
                subtotal += p["price_cents"] * line.quantity
            address = ship_address.strip() or customer["address"]
            cur = conn.execute(
                "INSERT INTO orders (customer_id, status, created_on, ship_address, subtotal_cents, total_cents) "
                "VALUES (?, 'pending_payment', ?, ?, ?, ?)",
                (customer_id, setting(conn, "today"), address, subtotal, subtotal),
            )
            order_id = int(cur.lastrowid or 0)
            for line in items:
                conn.execute(
                    "INSERT INTO order_items SELECT ?, id, ?, price_cents FROM products WHERE id = ?",
                    (order_id, line.quantity, line.product_id),
                )
                conn.execute(
                    "UPDATE products SET stock = stock - ? WHERE id = ?", (line.quantity, line.product_id)
                )
            return _order(conn, _order_row(conn, order_id))

    @app.tool(annotations=WRITE)
    def apply_coupon(order_id: int, code: str) -> dict[str, Any]:
        """Apply a coupon code to an order that awaits payment (one coupon per order)."""
        with db.tx() as conn:
            order = _order_row(conn, order_id)
            coupon = one(conn, "SELECT * FROM coupons WHERE code = ?", code.strip().upper())
            if coupon is None or not coupon["active"]:
                raise ToolError(f"coupon {code!r} is not valid")
            if order["status"] != "pending_payment":
                raise ToolError(f"order {order_id} is {order['status']}: coupons apply only before payment")
            if order["coupon"]:
                raise ToolError(f"order {order_id} already has coupon {order['coupon']}")
            if order["subtotal_cents"] < coupon["min_total_cents"]:
                raise ToolError(
                    f"coupon {coupon['code']} needs a subtotal of at least {dollars(coupon['min_total_cents'])}"
                )
            discount = order["subtotal_cents"] * coupon["percent_off"] // 100 + coupon["amount_off_cents"]
            conn.execute(
                "UPDATE orders SET coupon = ?, discount_cents = ?, total_cents = subtotal_cents - ? WHERE id = ?",
                (coupon["code"], discount, discount, order_id),
            )
            return _order(conn, _order_row(conn, order_id))

    @app.tool(annotations=WRITE)
    def confirm_payment(order_id: int, amount: float, bank_transaction_id: int) -> dict[str, Any]:
        """Record that the customer paid an order from their bank (the transaction id the bank gave
        for a payment to ShopCo); ``amount`` must equal the amount due."""
        with db.tx() as conn:
            order = _order_row(conn, order_id)
            if order["status"] != "pending_payment":
                raise ToolError(f"order {order_id} is {order['status']}, not awaiting payment")
            due = order["total_cents"] - order["paid_cents"]
            if round(amount * 100) != due:
                raise ToolError(f"order {order_id}: amount due is {dollars(due)}, got {amount}")
            conn.execute(
                "UPDATE orders SET status = 'paid', paid_cents = total_cents, payment_ref = ? WHERE id = ?",
                (f"BANK-TX-{bank_transaction_id}", order_id),
            )
            return _order(conn, _order_row(conn, order_id))

    @app.tool(annotations=DESTRUCTIVE)
    def cancel_order(
        order_id: int, refund_to: Literal["store_credit", "bank"] = "store_credit"
    ) -> dict[str, Any]:
        """Cancel an order that has not shipped; its stock returns and what was paid is refunded."""
        with db.tx() as conn:
            order = _order_row(conn, order_id)
            if order["status"] not in CANCELLABLE:
                raise ToolError(f"order {order_id} is {order['status']} and can no longer be cancelled")
            paid = order["paid_cents"]
            conn.execute(
                "UPDATE products SET stock = stock + (SELECT quantity FROM order_items i "
                "WHERE i.order_id = ? AND i.product_id = products.id) "
                "WHERE id IN (SELECT product_id FROM order_items WHERE order_id = ?)",
                (order_id, order_id),
            )
            conn.execute(
                "UPDATE orders SET status = 'cancelled', refund_to = ?, refunded_cents = ? WHERE id = ?",
                (refund_to if paid else None, paid, order_id),
            )
            if paid and refund_to == "store_credit":
                conn.execute(
                    "UPDATE customers SET store_credit_cents = store_credit_cents + ? WHERE id = ?",
                    (paid, order["customer_id"]),
                )
            result = _order(conn, _order_row(conn, order_id))
        result["refund_amount"] = dollars(paid)
        if paid and refund_to == "bank":
            result["refund_reference"] = f"RF-{order_id}"
            result["refund_merchant"] = "ShopCo"
        return result

    @app.tool(annotations=IDEMPOTENT)
    def update_address(customer_id: str, address: str) -> dict[str, Any]:
        """Change a customer's shipping address (orders already placed keep theirs)."""
        address = " ".join(address.split())
        if len(address) < 8 or "," not in address:
            raise ToolError(f"address {address!r} looks incomplete: expected '<number> <street>, <city>'")
        with db.tx() as conn:
            _customer_row(conn, customer_id)
            conn.execute("UPDATE customers SET address = ? WHERE id = ?", (address, customer_id))
        return {"customer_id": customer_id, "address": address}

    return app


def main(argv: list[str] | None = None) -> None:
    build(Database(db_path_from_args("mcprl_apps.shop", argv))).run("stdio")


if __name__ == "__main__":
    main()
