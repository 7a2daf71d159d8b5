"""launch.bench.compare_trials: two sets of recorded trials paired by seed and task."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from launch.bench.compare_trials import compare, format_comparison, main, read_trial
from launch.run_results import EvalPoint, Trial

TASKS = ("apps-eval-seen-0000", "apps-eval-seen-0001", "apps-eval-heldout-0000", "apps-eval-heldout-0001")


def trial(seed: int, warm: list[float], final: list[float], calls: list[float] | None = None) -> Trial:
    def point(phase: str, success: list[float]) -> EvalPoint:
        per_task = {"success": dict(zip(TASKS, success, strict=True))}
        if calls is not None:
            per_task["tool_calls"] = dict(zip(TASKS, calls, strict=True))
        return EvalPoint(phase, 0 if phase == "warmstart" else 4, per_task, lost=0)

    evals = {"warmstart": point("warmstart", warm), "final": point("final", final)}
    return Trial("grpo", seed, f"runs/s{seed}", evals, {1: 10.0})


def test_the_difference_is_paired_by_seed_and_task_with_the_reference_start_beside_it():
    reference = [trial(0, [1, 0, 0, 0], [0, 0, 0, 0], calls=[10, 10, 10, 10])]
    treatment = [trial(0, [1, 0, 0, 0], [1, 1, 0, 0])]
    (eval_tasks,) = compare(reference, treatment, ["success", "tool_calls"])
    assert eval_tasks["groups"] == {"all": 4, "seen": 2, "heldout": 2}
    success = eval_tasks["metrics"]["success"]
    assert success["start"]["all"] == (0.25, pytest.approx(0.25))
    assert success["reference"]["all"] == (0.0, 0.0)
    assert success["treatment"]["seen"] == (1.0, 0.0)
    # paired differences (1, 1, 0, 0): mean 0.5, SE s/sqrt(4) with s = sqrt(1/3)
    assert success["difference"]["all"] == (0.5, pytest.approx((1 / 3) ** 0.5 / 2))
    # a metric one side's record does not hold is named, not compared on the other alone
    assert eval_tasks["missing"] == ["tool_calls"] and "tool_calls" not in eval_tasks["metrics"]


def test_the_seeds_and_the_metrics_must_be_known():
    with pytest.raises(ValueError, match=r"seeds differ: reference \[0\], treatment \[1\]"):
        compare([trial(0, [0] * 4, [0] * 4)], [trial(1, [0] * 4, [0] * 4)], ["success"])
    with pytest.raises(ValueError, match=r"--treatment: seeds \[1, 1\]; expected one trial per seed"):
        compare([trial(1, [0] * 4, [0] * 4)], [trial(1, [0] * 4, [0] * 4)] * 2, ["success"])
    with pytest.raises(ValueError, match="--metrics: unknown sucess; expected some of success, "):
        compare([trial(0, [0] * 4, [0] * 4)], [trial(0, [0] * 4, [0] * 4)], ["sucess"])


def test_the_command_reads_records_and_run_directories_and_says_what_is_wrong(tmp_path: Path, capsys):
    for name, final in (("ref", [0, 0, 0, 0]), ("treat", [1, 0, 1, 0])):
        run = tmp_path / name
        run.mkdir()
        results = msgspec.to_builtins(trial(2, [0, 0, 0, 0], final))
        (run / "trial.json").write_text(json.dumps({"config": {}, "results": results}))
    assert read_trial(str(tmp_path / "ref")).seed == 2
    assert (
        main(["--reference", str(tmp_path / "ref"), "--treatment", str(tmp_path / "treat" / "trial.json")])
        == 0
    )
    out = capsys.readouterr().out
    assert "seeds [2]" in out
    assert "success         difference" in out and "+0.50±0.29" in out

    (tmp_path / "broken.json").write_text("{}")
    assert main(["--reference", str(tmp_path / "broken.json"), "--treatment", str(tmp_path / "treat")]) == 2
    assert "broken.json" in capsys.readouterr().err


def test_a_long_metric_name_keeps_the_table_in_columns():
    sets = compare(
        [trial(0, [1, 0, 0, 0], [0, 0, 0, 0])], [trial(0, [1, 0, 0, 0], [1, 1, 0, 0])], ["success"]
    )
    sets[0]["metrics"]["hallucinated_tools"] = sets[0]["metrics"]["success"]
    lines = format_comparison(sets, [0]).splitlines()
    long_row = next(line for line in lines if line.startswith("hallucinated_tools"))
    short_row = next(line for line in lines if line.startswith("success"))
    assert long_row.split()[1] == "start" and len(long_row) == len(short_row)
