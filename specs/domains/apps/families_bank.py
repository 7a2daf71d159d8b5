"""Template families on the bank alone: transfers, bills, cards, balances (see ``families``)."""

from __future__ import annotations

import random

from specs.domains.apps.families import (
    BANK,
    PAYEES,
    Draft,
    answer,
    call,
    customer,
    draft,
    me,
    no_new_txns,
    pick,
    sql,
)
from specs.domains.apps.world import NEW_TXNS, World, amount, usd


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
