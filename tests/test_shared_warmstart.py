"""``launch.shared_warmstart.read_saved``: what another run must have kept for this run to start
from its warm start, each gap refused naming the file (the end-to-end run: ``tests/test_ray_job.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launch.checkpoints import Progress, write_progress
from launch.shared_warmstart import read_saved
from specs.errors import SpecError
from specs.task import TaskSpec

TASKS = [TaskSpec(instance_id=f"calc-eval-seen-{i:04d}", instruction="x") for i in range(3)]
ROWS = [
    {"phase": "eval/base", "step": 0, "success": 0.0},
    {"phase": "warmstart", "step": 1, "loss": 0.4},
    {"phase": "warmstart", "step": 2, "loss": 0.3},
    {"phase": "eval/warmstart", "step": 0, "success": 0.5},
    {"phase": "train", "step": 1, "loss": 0.0},
    {"phase": "eval/final", "step": 1, "success": 0.7},
]


def saved_run(root: Path, rows: list[dict[str, object]] = ROWS, tasks: list[TaskSpec] = TASKS) -> Path:
    run = root / "first"
    (run / "trajectories").mkdir(parents=True)
    (run / "warmstart").mkdir()
    write_progress(str(run / "warmstart"), Progress(step=0, version=4, position=16))
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = [json.dumps({"task_id": t.instance_id, "token_ids": []}) for t in tasks]
    (run / "trajectories" / "eval_warmstart.jsonl").write_text("\n".join(lines) + "\n")
    return run


def test_a_kept_warm_start_gives_its_position_and_the_rows_before_the_rl_steps(tmp_path: Path) -> None:
    saved = read_saved(str(saved_run(tmp_path)), TASKS, eval_samples=0)
    assert saved.progress.position == 16 and saved.checkpoint == str(tmp_path / "first" / "warmstart")
    assert [(r["phase"], r["step"]) for r in saved.records] == [
        ("eval/base", 0),
        ("warmstart", 1),
        ("warmstart", 2),
        ("eval/warmstart", 0),
    ]


def test_a_run_that_kept_no_warm_start_is_refused_with_the_fix(tmp_path: Path) -> None:
    run = saved_run(tmp_path)
    (run / "warmstart" / "progress.json").unlink()  # a save cut short: never started from
    with pytest.raises(
        SpecError, match=r"warmstart.from_run: no saved warm start \(run it with warmstart.save=true\)"
    ):
        read_saved(str(run), TASKS, eval_samples=0)


def test_missing_evaluations_are_refused_naming_them(tmp_path: Path) -> None:
    run = saved_run(tmp_path, rows=[r for r in ROWS if r["phase"] != "eval/base"])
    with pytest.raises(SpecError, match=r"metrics.jsonl: warmstart.from_run: no eval/base row"):
        read_saved(str(run), TASKS, eval_samples=0)
    with pytest.raises(SpecError, match="no eval/base, eval_sampled/warmstart row"):
        read_saved(str(run), TASKS, eval_samples=2)  # this run samples its evals; that one did not


def test_evaluations_on_other_tasks_are_refused(tmp_path: Path) -> None:
    run = saved_run(tmp_path, tasks=TASKS[:2])
    with pytest.raises(
        SpecError, match=r"not on this run's eval tasks \(2 there, 3 here; .*calc-eval-seen-0002"
    ):
        read_saved(str(run), TASKS, eval_samples=0)


def test_the_warm_starts_eval_on_training_tasks_is_adopted_only_when_on_this_runs(tmp_path: Path) -> None:
    from launch.shared_warmstart import copy_trajectories, saved_train_eval_matches

    train = [TaskSpec(instance_id=f"calc-train-{i:04d}", instruction="x") for i in range(2)]
    run = saved_run(tmp_path, ROWS + [{"phase": "eval/warmstart_train", "step": 0, "success": 0.5}])
    records = read_saved(str(run), TASKS, eval_samples=0).records
    assert records[-1]["phase"] == "eval/warmstart_train"
    assert not saved_train_eval_matches(str(run), train)  # it evaluated no training task
    lines = [json.dumps({"task_id": t.instance_id}) for t in train]
    (run / "trajectories" / "eval_warmstart_train.jsonl").write_text("\n".join(lines) + "\n")
    assert saved_train_eval_matches(str(run), train)
    assert not saved_train_eval_matches(str(run), train[:1]) and not saved_train_eval_matches(str(run), [])
    for train_evals in (False, True):
        target = tmp_path / f"copy-{train_evals}"
        target.mkdir()
        copy_trajectories(str(run), str(target), train_evals=train_evals)
        assert (target / "eval_warmstart_train.jsonl").exists() == train_evals
        assert (target / "eval_warmstart.jsonl").exists()
