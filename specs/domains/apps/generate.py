"""Generate the apps domain's tasks: everyday shop and bank requests in the MCP-Universe task format.

Deterministic for a seed: ``python -m specs.domains.apps.generate`` rewrites ``tasks/train.json``
(108 tasks), ``tasks/eval.json`` (40 tasks) and ``tasks/eval_wide.json`` (68: ``MORE_SEEN``) byte for
byte; a test checks the shipped files equal a fresh generation. Tasks come from template families (``families``, ``families_bank``, ``families_orders``): single
server (bank or shop), two servers in one episode (shop + bank: pay an order, cancel with a bank
refund) and reads through the third-party ``mcp-server-sqlite`` (``shop_sql``/``bank_sql``). Eval
holds half seen families (new draws) and half held-out families (``families_heldout``) that never
appear in training.

Every task seeds its environment's databases (prepare ``apps.seed_db``) and is scored on the end
state by ``apps.sql_state`` verifiers computed from the seed (``world.World``); a question is also
checked on the number in the reply. Private fields: ``_plan`` (family and parameters for the
scripted expert) and ``_template``.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import Any

from specs.domains.apps import families as f
from specs.domains.apps import families_bank as b
from specs.domains.apps import families_heldout as h
from specs.domains.apps import families_orders as o
from specs.domains.apps.world import World
from specs.task_files import draw_round_robin, train_and_eval, write_task_files

TRAIN_FAMILIES: dict[str, f.Family] = {
    "transfer": b.transfer,
    "pay_bill": b.pay_bill,
    "freeze_card": b.freeze_card,
    "balance": b.balance,
    "update_address": f.update_address,
    "buy_cheapest": f.buy_cheapest,
    "cancel_latest": o.cancel_latest,
    "apply_coupon": o.apply_coupon,
    "pay_order": o.pay_order,
    "cancel_refund_bank": o.cancel_refund_bank,
    "stock_question": o.stock_question,
    "best_seller": o.best_seller,
}
HELDOUT_FAMILIES: dict[str, f.Family] = {
    "buy_and_pay": h.buy_and_pay,
    "move_then_pay": h.move_then_pay,
    "address_then_buy": h.address_then_buy,
    "spending_question": h.spending_question,
}
SEED_DBS = {
    "prepare_func": "apps.seed_db",
    "prepare_args": {"databases": {"shop.db": "shop", "bank.db": "bank"}},
}


def _task(instance_id: str, family: str, d: f.Draft) -> dict[str, Any]:
    return {
        "instance_id": instance_id,
        "category": f"apps/{family}",
        "instruction": d["instruction"],
        "output_format": d["output_format"],
        "use_specified_server": True,
        "mcp_servers": d["mcp_servers"],
        "prepares": [SEED_DBS],
        "evaluators": d["evaluators"],
        "reference_calls": d["reference_calls"],
        **({"cleanups": d["cleanups"]} if "cleanups" in d else {}),
        "_plan": d["_plan"],
        "_template": family,
    }


N_TRAIN, N_EVAL = 108, 40
MORE_SEEN = 28
"""``eval_wide.json``: ``eval.json`` and this many more new draws of the seen families, 4 of each of
the 12 in all (``eval.json`` holds 1-2), drawn after it so that its tasks stay as they are. On the
40 tasks a gain confined to the families RL trained on is under the noise (BENCHMARKS.md, "where
the eval gain goes"); 48 seen tasks give it the power to show."""


def task_files(seed: int = 0) -> dict[str, list[dict[str, Any]]]:
    """File name -> task dicts: ``train.json``, ``eval.json`` (half seen families, new draws; half
    held-out families) and ``eval_wide.json`` (``eval.json``'s seen tasks, ``MORE_SEEN`` more, then
    its held-out ones)."""
    rng, world = random.Random(seed), World()
    train, evals = train_and_eval(
        rng, world, TRAIN_FAMILIES, HELDOUT_FAMILIES, N_TRAIN, N_EVAL, "apps", _task
    )
    seen = {t["instruction"] for t in train + evals}
    half = N_EVAL // 2
    more = draw_round_robin(rng, world, TRAIN_FAMILIES, MORE_SEEN, "apps-eval-seen", seen, _task, start=half)
    return {"train.json": train, "eval.json": evals, "eval_wide.json": evals[:half] + more + evals[half:]}


def generate(seed: int = 0) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(train, eval) task dicts; eval is half seen families (new draws), half held-out families."""
    files = task_files(seed)
    return files["train.json"], files["eval.json"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "tasks")
    args = parser.parse_args(argv)
    files = task_files(args.seed)
    write_task_files(args.out, files)
    print(f"wrote {', '.join(f'{name} ({len(tasks)})' for name, tasks in files.items())} to {args.out}")


if __name__ == "__main__":
    main()
