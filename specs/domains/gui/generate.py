"""Generate the gui domain's tasks: warehouse inventory requests in the MCP-Universe task format.

Deterministic for a seed: ``python -m specs.domains.gui.generate`` rewrites ``tasks/train.json``
(48 tasks) and ``tasks/eval.json`` (24 tasks) byte for byte; a test checks the shipped files equal
a fresh generation. Train: six families, two of them GUI-only (``set_price``, ``add_item``); eval:
the same families (new draws) and two held-out ones mixing a GUI-only step with a tool step
(``price_and_restock``) or two steps either way (``restock_and_move``). Every task seeds
``inventory.db`` (prepare ``gui.seed_db``) and is scored on its end state (``apps.sql_state``).
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import Any

from specs.domains.gui import families as f
from specs.task_files import train_and_eval, write_task_files

TRAIN_FAMILIES: dict[str, f.Family] = {  # GUI-only ones among the first: `--limit 4` runs two
    "restock": f.restock,
    "set_price": f.set_price,
    "relocate": f.relocate,
    "add_item": f.add_item,
    "write_off": f.write_off,
    "stock_question": f.stock_question,
}
HELDOUT_FAMILIES: dict[str, f.Family] = {
    "price_and_restock": f.price_and_restock,
    "restock_and_move": f.restock_and_move,
}
GUI_ONLY = frozenset({"set_price", "add_item"})
"""Families no MCP tool can do (the reference calls hold no state-changing call)."""


def _task(instance_id: str, family: str, d: f.Draft) -> dict[str, Any]:
    return {
        "instance_id": instance_id,
        "category": f"gui/{family}",
        "instruction": d["instruction"],
        "output_format": d["output_format"],
        "use_specified_server": True,
        "mcp_servers": d["mcp_servers"],
        "prepares": [{"prepare_func": "gui.seed_db"}],
        "evaluators": d["evaluators"],
        "reference_calls": d["reference_calls"],
        "_plan": d["_plan"],
        "_template": family,
    }


def generate(
    seed: int = 0, n_train: int = 48, n_eval: int = 24
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(train, eval) task dicts; eval is half seen families (new draws), half held-out families."""
    return train_and_eval(
        random.Random(seed), f.World(), TRAIN_FAMILIES, HELDOUT_FAMILIES, n_train, n_eval, "gui", _task
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "tasks")
    args = parser.parse_args(argv)
    train, evals = generate(args.seed)
    write_task_files(args.out, {"train.json": train, "eval.json": evals})
    print(f"wrote {len(train)} train and {len(evals)} eval tasks to {args.out}")


if __name__ == "__main__":
    main()
