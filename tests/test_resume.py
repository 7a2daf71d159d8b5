"""Kill a training run after a step checkpoint, resume it: same data order, no step repeated or
skipped, the learner continues from its saved version (launch/train.py, real actors, CPU)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from launch.checkpoints import complete_steps, read_progress
from launch.tasks import TaskStream
from specs.task import load_tasks
from tests.waiting import wait_until

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
TASKS = REPO / "specs" / "domains" / "calculator" / "tasks" / "train.json"
DIST_VARS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")


def command(tmp_path: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "launch/train.py",
        f"output_dir={tmp_path}",
        "run_name=resume",
        "placement=async",
        "warmstart.enabled=false",
        "train.steps=3",
        "train.checkpoint_every=1",
        "train.eval_tasks_limit=1",
        "train.eval_samples=2",
        "train.eval_train_tasks=1",
        "rollout.tasks_per_step=2",
        "rollout.group_size=2",
        "rollout.max_turns=1",
        "rollout.max_new_tokens=16",
        "learner.lr=3e-5",
        "learner.warmup_steps=3",
        "learner.epochs_per_step=2",  # two versions a step: async staleness still counts one a step
        "wandb.mode=disabled",
        *extra,
    ]


def trained_steps(run_dir: Path) -> list[int]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [record["step"] for record in map(json.loads, lines) if record["phase"] == "train"]


def step_tasks(run_dir: Path, step: int) -> list[str]:
    path = run_dir / "trajectories" / f"step_{step:04d}.jsonl"
    return sorted({json.loads(line)["task_id"] for line in path.read_text().splitlines()})


def test_a_killed_run_resumes_at_the_next_step_with_the_same_data_order(tmp_path: Path) -> None:
    run_dir = tmp_path / "resume"
    # Not the rendezvous of this pytest process (an in-process learner test holds its port).
    env = {k: v for k, v in os.environ.items() if k not in DIST_VARS} | {"PYTHONUNBUFFERED": "1"}
    log = tmp_path / "first.log"  # a file, not a pipe: nothing reads while the run trains
    with log.open("wb") as out:
        first = subprocess.Popen(command(tmp_path), cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        # A checkpoint directory signals nothing to this process: checked until it holds step 2.
        def step_2_saved_or_run_ended() -> bool:
            saved = complete_steps(str(run_dir / "checkpoint"))
            return first.poll() is not None or any(step >= 2 for step, _ in saved)

        assert wait_until(step_2_saved_or_run_ended, 600), "no step-2 checkpoint within 10 minutes"
        assert first.poll() is None, log.read_text(errors="replace")[-3000:]
        first.send_signal(signal.SIGINT)  # killed while step 3 is sampling (or training)
        first.wait(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
    output = log.read_text(errors="replace")
    assert first.returncode in (0, 130), output[-3000:]
    latest = complete_steps(str(run_dir / "checkpoint"))[-1][1]
    killed_at = read_progress(latest).step
    assert killed_at >= 2

    resumed = subprocess.run(
        command(tmp_path, "train.resume=auto"), cwd=REPO, env=env, capture_output=True, text=True, timeout=900
    )
    assert resumed.returncode == 0, (resumed.stdout + resumed.stderr)[-3000:]
    assert f"resumed from {latest}: step {killed_at} done" in resumed.stdout

    # Each step trained (and logged) once, in order, across the two processes: a step the kill
    # interrupted before its checkpoint is trained by the resumed run only.
    assert trained_steps(run_dir) == [1, 2, 3]
    # the warmup counts RL steps, so the resumed run goes on with it rather than starting it again
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    lrs = [record["lr"] for record in records if record["phase"] == "train"]
    assert lrs == pytest.approx([1e-5, 2e-5, 3e-5])
    # async, one step off-policy: no group was dropped as stale, however many updates a step made
    trained = [record for record in records if record["phase"] == "train"]
    assert all(r.get("lost_stale", 0) == 0 and r["staleness_max"] <= 1 for r in trained), trained
    # The data order is the seeded stream's, as if never interrupted.
    stream = TaskStream(load_tasks(TASKS), seed=0)
    for step in (1, 2, 3):
        assert step_tasks(run_dir, step) == sorted(t.instance_id for t in stream.take(2))
    final = read_progress(complete_steps(str(run_dir / "checkpoint"))[-1][1])
    assert final.step == 3 and final.position == 6
    # each eval also sampled train.eval_samples episodes per task, logged apart from the greedy one
    sampled = (run_dir / "trajectories" / "eval_final_sampled.jsonl").read_text().splitlines()
    assert len(sampled) == 2 and "eval_sampled/final" in (run_dir / "metrics.jsonl").read_text()
    # the closing table read the run back: the evals with standard errors
    assert re.search(r"^final +[\d.]+ ± [\d.]+", resumed.stdout, re.MULTILINE), resumed.stdout[-2000:]
    # train.eval_train_tasks: the first run evaluated its start on a training task, the resumed one
    # did not again, and evaluated its end there too
    first_train_task = load_tasks(TASKS)[0].instance_id
    for phase in ("base_train", "final_train"):
        greedy = (run_dir / "trajectories" / f"eval_{phase}.jsonl").read_text().splitlines()
        assert [json.loads(line)["task_id"] for line in greedy] == [first_train_task]
    phases = [json.loads(line)["phase"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert phases.count("eval/base_train") == 1 and phases.count("eval/final_train") == 1
    assert (
        "on training tasks (train.eval_train_tasks), final - start paired by task: all (1)" in resumed.stdout
    )


@pytest.fixture(autouse=True)
def _repo_cwd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)


def test_a_run_goes_on_from_its_start_without_doing_its_evals_again(tmp_path: Path) -> None:
    """Step 0's checkpoint holds the start (the base policy, its evals and the stream before any
    step): a run planned for 0 steps, then again for 1, evaluates the base policy once."""
    run_dir = tmp_path / "resume"
    env = {k: v for k, v in os.environ.items() if k not in DIST_VARS}

    def run(*extra: str) -> str:
        done = subprocess.run(
            command(tmp_path, *extra), cwd=REPO, env=env, capture_output=True, text=True, timeout=900
        )
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        return done.stdout

    run("train.steps=0")
    (start,) = complete_steps(str(run_dir / "checkpoint"))
    assert start[0] == 0 and read_progress(start[1]).position == 0
    resumed = run("train.steps=1", "train.resume=auto")
    assert f"resumed from {start[1]}: step 0 done" in resumed
    assert trained_steps(run_dir) == [1]
    stream = TaskStream(load_tasks(TASKS), seed=0)
    assert step_tasks(run_dir, 1) == sorted(t.instance_id for t in stream.take(2))
    phases = [json.loads(line)["phase"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert phases.count("eval/base") == 1 and phases.count("eval/base_train") == 1
