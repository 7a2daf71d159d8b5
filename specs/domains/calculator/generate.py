"""Generate the calculator domain's tasks: arithmetic word problems in the MCP-Universe task format.

Deterministic for a seed: ``python -m specs.domains.calculator.generate`` rewrites ``tasks/train.json``
(200 tasks) and ``tasks/eval.json`` (48 tasks) byte for byte; a test checks the shipped files equal a
fresh generation. Problems come from template families, each with several phrasings and one- or
two-step arithmetic. Eval holds half seen families (new numbers) and half *held-out* families that
never appear in training, so an eval score can tell memorised templates from tool use.

Every task names the ``calculator`` server (PyPI ``mcp-server-calculator``, tool ``calculate``), asks
for a final sentence ``The answer is N.``, and is checked by the generic ops ``number`` / ``approx``.
Each task carries one reference call for the tool reward (``rewards.tool_reward``, MCPDisCo Eq. 5-8):
``calculator`` / ``calculate`` with ``{"expression": <reference expression>}``, the very call the
scripted expert makes, so an expert episode earns the maximum R_tool.
Private fields: ``_expression`` (a reference expression for the calculator, used by the scripted
expert), ``_answer`` (the number) and ``_template`` (the family).
"""

from __future__ import annotations

import argparse
import ast
import operator
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specs.task_files import write_task_files

Problem = tuple[str, str]  # (instruction, expression)
Template = Callable[[random.Random], Problem]

OUTPUT_FORMAT = "End your reply with one sentence of the form: The answer is <number>."
NAMES = ("Ana", "Ben", "Chloe", "Dev", "Elif", "Farid", "Grace", "Hugo", "Ines", "Jonas", "Kemi", "Leo")
ITEMS = ("pens", "apples", "stickers", "marbles", "cards", "books", "cookies", "stamps", "shells", "beads")
CONTAINERS = ("box", "crate", "bag", "jar", "basket", "drawer")


def _pick(rng: random.Random, options: tuple[str, ...]) -> str:
    return options[rng.randrange(len(options))]


def _plural(noun: str) -> str:
    return noun + ("es" if noun.endswith(("x", "s", "sh", "ch")) else "s")


def _add(rng: random.Random) -> Problem:
    a, b = rng.randint(120, 980), rng.randint(120, 980)
    name, item = _pick(rng, NAMES), _pick(rng, ITEMS)
    text = _pick(
        rng,
        (
            f"{name} has {a} {item} and is given {b} more. How many {item} does {name} have now?",
            f"A library shelf holds {a} {item}; another holds {b}. How many {item} are on both shelves together?",
            f"What is the total when {a} {item} are added to {b} {item}?",
        ),
    )
    return text, f"{a}+{b}"


def _sub(rng: random.Random) -> Problem:
    a = rng.randint(400, 990)
    b = rng.randint(101, a - 50)
    item, box = _pick(rng, ITEMS), _pick(rng, CONTAINERS)
    text = _pick(
        rng,
        (
            f"A {box} holds {a} {item}. {b} of them are taken out. How many {item} are left in the {box}?",
            f"There were {a} {item} in stock and {b} were sold. How many {item} remain?",
            f"{_pick(rng, NAMES)} collected {a} {item} and gave away {b}. How many are left?",
        ),
    )
    return text, f"{a}-{b}"


def _mul(rng: random.Random) -> Problem:
    a, b = rng.randint(12, 89), rng.randint(12, 89)
    item, box = _pick(rng, ITEMS), _pick(rng, CONTAINERS)
    boxes = _plural(box)
    text = _pick(
        rng,
        (
            f"There are {a} {boxes} with {b} {item} in each. How many {item} are there in total?",
            f"Each {box} contains {b} {item}. How many {item} are in {a} {boxes}?",
            f"A school orders {a} packs of {b} {item}. How many {item} does it get?",
        ),
    )
    return text, f"{a}*{b}"


def _div(rng: random.Random) -> Problem:
    b, q = rng.randint(6, 48), rng.randint(12, 95)
    a = b * q
    item = _pick(rng, ITEMS)
    text = _pick(
        rng,
        (
            f"{a} {item} are shared equally among {b} children. How many {item} does each child get?",
            f"A factory packs {a} {item} into bags of {b}. How many bags does it fill?",
            f"If {b} friends split {a} {item} evenly, how many does each friend receive?",
        ),
    )
    return text, f"{a}/{b}"


def _mul_sub(rng: random.Random) -> Problem:
    a, b = rng.randint(12, 48), rng.randint(12, 48)
    c = rng.randint(11, a * b - 10)
    item, box = _pick(rng, ITEMS), _pick(rng, CONTAINERS)
    boxes = _plural(box)
    text = _pick(
        rng,
        (
            f"A shop has {a} {boxes} of {b} {item}; {c} {item} are sold. How many {item} are left?",
            f"{_pick(rng, NAMES)} packed {a} {boxes} with {b} {item} each, then removed {c} {item}. "
            f"How many {item} are still packed?",
            f"A warehouse stores {a} {boxes} holding {b} {item} apiece. After {c} {item} are shipped, how many remain?",
        ),
    )
    return text, f"{a}*{b}-{c}"


def _mul_add(rng: random.Random) -> Problem:
    a, b, c = rng.randint(12, 48), rng.randint(12, 48), rng.randint(11, 99)
    name, item = _pick(rng, NAMES), _pick(rng, ITEMS)
    text = _pick(
        rng,
        (
            f"{name} buys {a} packs of {b} {item} and {c} loose {item}. How many {item} does {name} buy?",
            f"A stall has {a} trays of {b} {item} plus {c} extra {item}. How many {item} are there altogether?",
            f"There are {c} {item} on a table and {a} bags with {b} {item} each. How many {item} are there in all?",
        ),
    )
    return text, f"{a}*{b}+{c}"


def _sum_div(rng: random.Random) -> Problem:
    c, q = rng.randint(3, 12), rng.randint(25, 140)
    total = c * q
    a = rng.randint(total // 4, 3 * total // 4)
    b = total - a
    name = _pick(rng, NAMES)
    text = _pick(
        rng,
        (
            f"A dinner costs {a} dollars for food and {b} dollars for drinks. {c} friends split the bill equally. "
            f"How many dollars does each pay?",
            f"{name} earns {a} dollars on Monday and {b} dollars on Tuesday, then shares it equally with {c - 1} "
            f"others. How many dollars does each person get?",
            f"Two classes collect {a} and {b} cans. The cans are packed equally into {c} boxes. How many cans per box?",
        ),
    )
    return text, f"({a}+{b})/{c}"


# Held out: never in training.
def _change(rng: random.Random) -> Problem:
    a, b = rng.randint(3, 19), rng.randint(4, 39)
    c = (a * b // 50 + 1 + rng.randint(0, 3)) * 50
    name = _pick(rng, NAMES)
    text = _pick(
        rng,
        (
            f"{name} buys {a} notebooks at {b} dollars each and pays with {c} dollars. How much change does "
            f"{name} get back?",
            f"Tickets cost {b} dollars each. A group buys {a} tickets and hands over {c} dollars. What is the change?",
        ),
    )
    return text, f"{c}-{a}*{b}"


def _average(rng: random.Random) -> Problem:
    x, y = rng.randint(40, 99), rng.randint(40, 99)
    z = rng.randint(40, 99)
    z += (-(x + y + z)) % 3  # keep the mean whole
    text = _pick(
        rng,
        (
            f"Three tests were scored {x}, {y} and {z}. What is the average score?",
            f"A runner covers {x}, {y} and {z} kilometres in three weeks. What is the mean distance per week?",
        ),
    )
    return text, f"({x}+{y}+{z})/3"


def _two_products(rng: random.Random) -> Problem:
    a, b, c, d = (rng.randint(11, 39) for _ in range(4))
    item = _pick(rng, ITEMS)
    text = _pick(
        rng,
        (
            f"A store gets {a} boxes of {b} {item} and {c} boxes of {d} {item}. How many {item} arrive in total?",
            f"One room has {a} rows of {b} seats and another has {c} rows of {d} seats. How many seats in all?",
        ),
    )
    return text, f"{a}*{b}+{c}*{d}"


TRAIN_TEMPLATES: dict[str, Template] = {
    "add": _add,
    "sub": _sub,
    "mul": _mul,
    "div": _div,
    "mul_sub": _mul_sub,
    "mul_add": _mul_add,
    "sum_div": _sum_div,
}
HELDOUT_TEMPLATES: dict[str, Template] = {
    "change": _change,
    "average": _average,
    "two_products": _two_products,
}


_BINOPS: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def evaluate_expression(expression: str) -> float:
    """The value of a generated expression (integers, + - * / and parentheses only)."""

    def ev(node: ast.expr) -> float:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return float(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _BINOPS[type(node.op)](ev(node.left), ev(node.right))
        raise ValueError(f"unsupported element in {expression!r}: {ast.dump(node)}")

    return ev(ast.parse(expression, mode="eval").body)


def _task(instance_id: str, family: str, problem: Problem) -> dict[str, Any]:
    instruction, expression = problem
    value = evaluate_expression(expression)
    answer: int | float = int(value) if value.is_integer() else value
    return {
        "instance_id": instance_id,
        "category": f"arithmetic/{family}",
        "instruction": instruction,
        "output_format": OUTPUT_FORMAT,
        "use_specified_server": True,
        "mcp_servers": [{"name": "calculator"}],
        "evaluators": [
            {
                "func": "number",
                "op": "approx",
                "value": answer,
                "op_args": {"abs_tol": 1e-6},
                "desc": "The final number of the reply equals the answer.",
            }
        ],
        # What the scripted expert sends (expert.py): the tool reward's reference call, matched exactly.
        "reference_calls": [
            {"server": "calculator", "tool": "calculate", "arguments": {"expression": expression}}
        ],
        "_expression": expression,
        "_answer": answer,
        "_template": family,
    }


def _draw(
    rng: random.Random, templates: dict[str, Template], n: int, prefix: str, seen: set[str]
) -> list[dict[str, Any]]:
    names = list(templates)
    tasks: list[dict[str, Any]] = []
    while len(tasks) < n:
        family = names[len(tasks) % len(names)]  # round robin keeps the families balanced
        problem = templates[family](rng)
        if problem[0] in seen:
            continue
        seen.add(problem[0])
        tasks.append(_task(f"{prefix}-{len(tasks):04d}", family, problem))
    return tasks


def generate(
    seed: int = 0, n_train: int = 200, n_eval: int = 48
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(train, eval) task dicts; eval is half seen families (new problems), half held-out families."""
    rng = random.Random(seed)
    seen: set[str] = set()
    train = _draw(rng, TRAIN_TEMPLATES, n_train, "calc-train", seen)
    seen_half = _draw(rng, TRAIN_TEMPLATES, n_eval // 2, "calc-eval-seen", seen)
    heldout = _draw(rng, HELDOUT_TEMPLATES, n_eval - n_eval // 2, "calc-eval-heldout", seen)
    return train, seen_half + heldout


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "tasks")
    args = parser.parse_args(argv)
    train, evals = generate(args.seed)
    write_task_files(args.out, {"train.json": train, "eval.json": evals})
    print(f"wrote {len(train)} train and {len(evals)} eval tasks to {args.out}")


if __name__ == "__main__":
    main()
