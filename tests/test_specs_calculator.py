"""The calculator domain: deterministic generation, shipped files current, answers right per the real server."""

from __future__ import annotations

import os
import re
from pathlib import Path

import anyio
import pytest

from rewards.ops import evaluate_op
from specs.domains.calculator.generate import (
    CONTAINERS,
    HELDOUT_TEMPLATES,
    ITEMS,
    NAMES,
    TRAIN_TEMPLATES,
    _plural,
    generate,
)
from specs.env import ServerLaunch
from specs.servers import load_server_registry
from specs.task import load_tasks
from specs.task_files import render

DOMAIN = Path(__file__).resolve().parent.parent / "specs" / "domains" / "calculator"


def test_the_same_seed_gives_the_same_tasks_and_another_seed_different_ones() -> None:
    assert generate(3) == generate(3)
    assert generate(3) != generate(4)


def test_the_shipped_task_files_equal_a_fresh_generation() -> None:
    train, evals = generate(0)
    assert (DOMAIN / "tasks" / "train.json").read_text(encoding="utf-8") == render(train), (
        "stale: run python -m specs.domains.calculator.generate"
    )
    assert (DOMAIN / "tasks" / "eval.json").read_text(encoding="utf-8") == render(evals)


def test_the_shipped_tasks_load_and_every_reference_answer_passes_its_evaluator() -> None:
    train = load_tasks(DOMAIN / "tasks" / "train.json")
    evals = load_tasks(DOMAIN / "tasks" / "eval.json")
    assert (len(train), len(evals)) == (200, 48)
    for task in train + evals:
        assert task.server_names == ("calculator",)
        [spec] = task.evaluators
        answer = task.private["_answer"]
        assert evaluate_op(spec.func, spec.op, spec.value, spec.op_args, f"The answer is {answer}.").passed
        assert not evaluate_op(
            spec.func, spec.op, spec.value, spec.op_args, f"The answer is {answer + 1}."
        ).passed


def test_eval_holds_out_template_families_and_shares_no_problem_with_train() -> None:
    train = load_tasks(DOMAIN / "tasks" / "train.json")
    evals = load_tasks(DOMAIN / "tasks" / "eval.json")
    train_families = {t.private["_template"] for t in train}
    eval_families = {t.private["_template"] for t in evals}
    assert train_families == set(TRAIN_TEMPLATES)
    assert set(HELDOUT_TEMPLATES) <= eval_families and not set(HELDOUT_TEMPLATES) & train_families
    assert not {t.instruction for t in train} & {t.instruction for t in evals}
    for family in TRAIN_TEMPLATES:
        shapes = {_shape(t.instruction) for t in train if t.private["_template"] == family}
        assert len(shapes) >= 3, family  # several phrasings per family, not one sentence with new numbers


def _shape(text: str) -> str:
    """The phrasing of a problem with its numbers, names, items and containers masked."""
    words = (
        re.sub(r"\d+", "N", text)
        .replace(".", " ")
        .replace(",", " ")
        .replace("?", " ")
        .replace(";", " ")
        .split()
    )
    nouns = {*NAMES, *ITEMS, *CONTAINERS, *(_plural(c) for c in CONTAINERS)}
    masked = ["W" if w in nouns else w for w in words]
    return " ".join(masked)


@pytest.fixture
def calculator_launch(monkeypatch: pytest.MonkeyPatch) -> ServerLaunch:
    """The shipped server entry, launched; skips where its own virtual environment is not built."""
    monkeypatch.chdir(DOMAIN.parents[2])  # the registry names the server's venv relative to the project root
    launch = load_server_registry(DOMAIN / "servers.json").launch("calculator", environ={})
    if not os.path.exists(launch.command):
        pytest.skip(
            f"calculator server venv missing at {launch.command} (see specs/domains/calculator/README.md)"
        )
    return launch


@pytest.mark.anyio
async def test_the_real_calculator_server_computes_every_reference_expression(
    calculator_launch: ServerLaunch,
) -> None:
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    launch = calculator_launch
    tasks = load_tasks(DOMAIN / "tasks" / "train.json")[:20] + load_tasks(DOMAIN / "tasks" / "eval.json")
    params = StdioServerParameters(command=launch.command, args=list(launch.args), env=launch.env or None)
    with anyio.fail_after(60):
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            for task in tasks:
                result = await session.call_tool("calculate", {"expression": task.private["_expression"]})
                text = result.content[0].text
                assert not result.is_error, text
                assert float(text) == pytest.approx(task.private["_answer"]), task.instance_id
