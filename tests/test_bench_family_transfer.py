"""launch.bench.family_transfer: recorded trials' eval gains split by the families RL trained on."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from launch.bench.family_transfer import main, pooled, read
from launch.run_results import EvalPoint, Trial

TRAIN = [("tr-0", "shop/buy"), ("tr-1", "bank/pay"), ("tr-2", "bank/freeze")]
EVAL = [("ev-0", "shop/buy"), ("ev-1", "shop/buy"), ("ev-2", "bank/pay"), ("ev-3", "mixed/buy_and_pay")]


def write_tasks(path: Path, tasks: list[tuple[str, str]]) -> str:
    """An MCP-Universe task file, one minimal valid task per (id, category)."""
    check = {"func": "raw", "op": "contains", "value": "done"}
    path.write_text(
        json.dumps(
            [
                {
                    "instance_id": i,
                    "category": c,
                    "instruction": "-",
                    "mcp_servers": [{"name": "s"}],
                    "evaluators": [check],
                }
                for i, c in tasks
            ]
        )
    )
    return str(path)


def record(tmp_path: Path, name: str, trained: list[str], warm: list[float], final: list[float]) -> Path:
    """A finished trial's directory: its trial.json with config and results."""
    ids = [i for i, _ in EVAL]

    def point(phase: str, success: list[float]) -> EvalPoint:
        return EvalPoint(phase, 0, {"success": dict(zip(ids, success, strict=True))}, lost=0)

    evals = {"warmstart": point("warmstart", warm), "final": point("final", final)}
    trial = Trial("grpo", 0, name, evals, {}, trained)
    domain = {
        "tasks": write_tasks(tmp_path / "train.json", TRAIN),
        "eval_tasks": write_tasks(tmp_path / "eval.json", EVAL),
    }
    run = tmp_path / name
    run.mkdir()
    (run / "trial.json").write_text(
        json.dumps({"config": {"domain": domain, "mix": []}, "results": msgspec.to_builtins(trial)})
    )
    return run


def test_each_eval_task_is_grouped_by_whether_its_family_was_trained(tmp_path: Path):
    run = record(tmp_path, "a", trained=["tr-0"], warm=[0, 1, 0, 0], final=[1, 1, 1, 0])
    _, gains = read(str(run))
    # shop/buy was trained (ev-0 +1, ev-1 0); bank/pay is a training family not sampled; the
    # eval-only family is new
    assert gains == {"trained": [1.0, 0.0], "untrained": [1.0], "new": [0.0]}


def test_pooling_weighs_each_trial_once_and_each_cell_once():
    rows = [
        {"trained": [1.0, 1.0, 1.0, 0.0], "untrained": [], "new": [0.0]},
        {"trained": [0.0, 0.0], "untrained": [1.0], "new": [0.0]},
    ]
    pool = pooled(rows)
    # over trials: means (0.75, 0.0) -> 0.375, SE = s / sqrt(2) with s = 0.75 / sqrt(2)
    assert pool["trained"]["over_trials"] == (0.375, pytest.approx(0.375))
    # over cells: (1, 1, 1, 0, 0, 0) -> 0.5, SE sqrt(0.3 / 6)
    assert pool["trained"]["over_cells"] == (0.5, pytest.approx((0.3 / 6) ** 0.5))
    assert pool["untrained"]["trials"] == 1 and pool["new"]["cells"] == 2


def test_the_command_prints_a_row_per_trial_and_says_what_is_wrong(tmp_path: Path, capsys):
    a = record(tmp_path, "a", trained=["tr-0"], warm=[0, 1, 0, 0], final=[1, 1, 1, 0])
    b = record(tmp_path, "b", trained=["tr-1"], warm=[0, 0, 0, 0], final=[0, 0, 1, 0])
    assert main([str(a), str(b / "trial.json")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split() == [str(a), "+0.50", "(2)", "+1.00", "(1)", "+0.00", "(1)"]
    assert out[2].split()[:3] == [str(b), "+1.00", "(1)"]  # bank/pay trained in b: ev-2's gain
    # per trial (+0.5, +1.0) and per cell (+1, 0, +1) on the trained families
    assert out[-2].split()[:5] == ["pooled,", "SE", "over", "trials", "+0.75±0.25"]
    assert out[-1].split()[:5] == ["pooled,", "SE", "over", "cells", "+0.67±0.33"]

    untracked = record(tmp_path, "c", trained=[], warm=[0] * 4, final=[0] * 4)
    assert main([str(untracked)]) == 2
    assert "no trained tasks recorded" in capsys.readouterr().err
    (tmp_path / "eval.json").write_text("[]")  # the task loader's own errors name the file
    assert main([str(a)]) == 2
    assert "eval.json" in capsys.readouterr().err
