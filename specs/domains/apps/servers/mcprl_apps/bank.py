"""The bank: holders, checking and savings accounts, cards and a transaction ledger, in one SQLite file.

    python -m mcprl_apps.bank --db bank.db

Tools (read-only ones carry ``readOnlyHint``): ``list_accounts``, ``get_balance``,
``list_transactions``, ``list_cards``, ``list_payees``, ``transfer``, ``pay_bill``,
``receive_refund``, ``freeze_card``, ``unfreeze_card``. Rules: no account goes below zero
(insufficient funds is an error); transfers move money between two accounts of the same holder;
bills go to registered payees only; a merchant refund is credited once per reference
(``RF-<number>``). Every movement is a ledger row with the balance after it.
"""

from __future__ import annotations

import re
import sqlite3
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

from mcprl_apps.db import Database, db_path_from_args, dollars, one, setting, to_cents

READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITE = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)
IDEMPOTENT = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
REFUND_REF = re.compile(r"^RF-\d+$")


def _account(conn: sqlite3.Connection, account_id: str) -> sqlite3.Row:
    row: sqlite3.Row | None = one(conn, "SELECT * FROM accounts WHERE id = ?", account_id.strip().upper())
    if row is None:
        raise ToolError(f"no account with id {account_id!r}")
    return row


def _post(conn: sqlite3.Connection, account: sqlite3.Row, kind: str, cents: int, party: str, ref: str) -> int:
    """Move ``cents`` (signed) on ``account`` and ledger it; the transaction id."""
    balance = account["balance_cents"] + cents
    if balance < 0:
        raise ToolError(
            f"insufficient funds in {account['id']}: balance {dollars(account['balance_cents'])}, "
            f"needs {dollars(-cents)}"
        )
    conn.execute("UPDATE accounts SET balance_cents = ? WHERE id = ?", (balance, account["id"]))
    cur = conn.execute(
        "INSERT INTO transactions (account_id, posted_on, kind, amount_cents, counterparty, reference, "
        "balance_after_cents) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (account["id"], setting(conn, "today"), kind, cents, party, ref, balance),
    )
    return int(cur.lastrowid or 0)


def _txn(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "transaction_id": row["id"],
        "account_id": row["account_id"],
        "posted_on": row["posted_on"],
        "kind": row["kind"],
        "amount": dollars(row["amount_cents"]),
        "counterparty": row["counterparty"],
        "reference": row["reference"],
        "balance_after": dollars(row["balance_after_cents"]),
    }


def _card(conn: sqlite3.Connection, card_id: str, status: str) -> dict[str, Any]:
    row = one(conn, "SELECT * FROM cards WHERE id = ?", card_id.strip().upper())
    if row is None:
        raise ToolError(f"no card with id {card_id!r}")
    if row["status"] == status:
        return {"card_id": row["id"], "last4": row["last4"], "status": status, "changed": False}
    conn.execute("UPDATE cards SET status = ? WHERE id = ?", (status, row["id"]))
    return {"card_id": row["id"], "last4": row["last4"], "status": status, "changed": True}


def build(db: Database) -> MCPServer:
    """The bank server over ``db``."""
    app = MCPServer("bank", instructions="A retail bank. Amounts are in dollars.")

    @app.tool(annotations=READ)
    def list_accounts(email: str) -> dict[str, Any]:
        """The holder (by email) and their accounts with balances."""
        with db.tx() as conn:
            holder = one(conn, "SELECT * FROM holders WHERE lower(email) = lower(?)", email.strip())
            if holder is None:
                raise ToolError(f"no account holder with email {email!r}")
            rows = conn.execute("SELECT * FROM accounts WHERE holder_id = ? ORDER BY id", (holder["id"],))
            accounts = [
                {"account_id": r["id"], "kind": r["kind"], "balance": dollars(r["balance_cents"])}
                for r in rows
            ]
        return {"holder_id": holder["id"], "name": holder["name"], "accounts": accounts}

    @app.tool(annotations=READ)
    def get_balance(account_id: str) -> dict[str, Any]:
        """The current balance of one account."""
        with db.tx() as conn:
            row = _account(conn, account_id)
        return {"account_id": row["id"], "kind": row["kind"], "balance": dollars(row["balance_cents"])}

    @app.tool(annotations=READ)
    def list_transactions(account_id: str, limit: int = 10) -> dict[str, Any]:
        """The latest transactions of an account, newest first (``limit`` 1-100)."""
        if not 1 <= limit <= 100:
            raise ToolError(f"limit must be between 1 and 100, got {limit}")
        with db.tx() as conn:
            row = _account(conn, account_id)
            rows = conn.execute(
                "SELECT * FROM transactions WHERE account_id = ? ORDER BY id DESC LIMIT ?", (row["id"], limit)
            ).fetchall()
        return {"account_id": row["id"], "transactions": [_txn(r) for r in rows]}

    @app.tool(annotations=READ)
    def list_cards(email: str) -> dict[str, Any]:
        """The holder's cards: id, last four digits, the account each draws on, and status."""
        with db.tx() as conn:
            rows = conn.execute(
                "SELECT c.* FROM cards c JOIN accounts a ON a.id = c.account_id JOIN holders h ON h.id = a.holder_id "
                "WHERE lower(h.email) = lower(?) ORDER BY c.id",
                (email.strip(),),
            ).fetchall()
        if not rows:
            raise ToolError(f"no cards for a holder with email {email!r}")
        cards = [
            {"card_id": r["id"], "last4": r["last4"], "account_id": r["account_id"], "status": r["status"]}
            for r in rows
        ]
        return {"cards": cards}

    @app.tool(annotations=READ)
    def list_payees() -> dict[str, Any]:
        """The registered billers and merchants a bill can be paid to."""
        with db.tx() as conn:
            rows = conn.execute("SELECT name, category FROM payees ORDER BY name").fetchall()
        return {"payees": [{"name": r[0], "category": r[1]} for r in rows]}

    @app.tool(annotations=WRITE)
    def transfer(from_account_id: str, to_account_id: str, amount: float, memo: str = "") -> dict[str, Any]:
        """Move money between two accounts of the same holder."""
        cents = to_cents(amount)
        with db.tx() as conn:
            src, dst = _account(conn, from_account_id), _account(conn, to_account_id)
            if src["id"] == dst["id"]:
                raise ToolError("from_account_id and to_account_id are the same account")
            if src["holder_id"] != dst["holder_id"]:
                raise ToolError(f"{src['id']} and {dst['id']} belong to different holders")
            out_id = _post(conn, src, "transfer_out", -cents, dst["id"], memo)
            in_id = _post(conn, dst, "transfer_in", cents, src["id"], memo)
            balances = {
                r["id"]: dollars(r["balance_cents"])
                for r in (_account(conn, src["id"]), _account(conn, dst["id"]))
            }
        return {"transaction_ids": [out_id, in_id], "amount": dollars(cents), "balances": balances}

    @app.tool(annotations=WRITE)
    def pay_bill(account_id: str, payee: str, amount: float, reference: str = "") -> dict[str, Any]:
        """Pay a registered payee (see ``list_payees``) from an account; the transaction id comes back."""
        cents = to_cents(amount)
        with db.tx() as conn:
            known = one(conn, "SELECT name FROM payees WHERE lower(name) = lower(?)", payee.strip())
            if known is None:
                raise ToolError(f"{payee!r} is not a registered payee; see list_payees")
            account = _account(conn, account_id)
            txn_id = _post(conn, account, "bill_payment", -cents, known["name"], reference.strip())
            return _txn(conn.execute("SELECT * FROM transactions WHERE id = ?", (txn_id,)).fetchone())

    @app.tool(annotations=WRITE)
    def receive_refund(account_id: str, merchant: str, amount: float, reference: str) -> dict[str, Any]:
        """Credit a merchant's refund to an account, once per refund reference (``RF-<number>``)."""
        cents = to_cents(amount)
        ref = reference.strip().upper()
        if not REFUND_REF.match(ref):
            raise ToolError(f"refund reference must look like RF-<number>, got {reference!r}")
        with db.tx() as conn:
            if (
                one(conn, "SELECT id FROM transactions WHERE kind = 'refund' AND reference = ?", ref)
                is not None
            ):
                raise ToolError(f"refund {ref} was already credited")
            known = one(conn, "SELECT name FROM payees WHERE lower(name) = lower(?)", merchant.strip())
            if known is None:
                raise ToolError(f"{merchant!r} is not a known merchant")
            txn_id = _post(conn, _account(conn, account_id), "refund", cents, known["name"], ref)
            return _txn(conn.execute("SELECT * FROM transactions WHERE id = ?", (txn_id,)).fetchone())

    @app.tool(annotations=IDEMPOTENT)
    def freeze_card(card_id: str) -> dict[str, Any]:
        """Freeze a card (lost or stolen): it stops working until unfrozen."""
        with db.tx() as conn:
            return _card(conn, card_id, "frozen")

    @app.tool(annotations=IDEMPOTENT)
    def unfreeze_card(card_id: str) -> dict[str, Any]:
        """Unfreeze a frozen card."""
        with db.tx() as conn:
            return _card(conn, card_id, "active")

    return app


def main(argv: list[str] | None = None) -> None:
    build(Database(db_path_from_args("mcprl_apps.bank", argv))).run("stdio")


if __name__ == "__main__":
    main()
