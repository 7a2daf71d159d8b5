"""A training run's results read back from its run directory: per eval, each metric per task.

``launch.report.Reporter`` writes ``<run_dir>/trajectories/eval_<phase>.jsonl`` per eval (``base``,
``warmstart``, ``step<k>``, ``final``; ``eval_<phase>_sampled.jsonl`` with ``train.eval_samples``;
``eval_<start>_train`` (``warmstart`` or ``base``) and ``eval_final_train`` on training tasks with
``train.eval_train_tasks``),
``step_<k>.jsonl`` per training step and ``<run_dir>/metrics.jsonl`` (a ``train`` row per step,
with its ``step_s``). ``read_run`` turns them into a ``Trial``: each eval's
``policies.metrics.per_episode`` metrics per task (the mean over the task's scored episodes), the
steps' wall seconds and the tasks the steps trained on. ``train.py``'s closing table and the
learning bench (``launch.bench.learning_report``) both read runs this way.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import msgspec

from policies.metrics import per_episode
from specs.trajectory import Trajectory

EVAL_FILE = re.compile(r"eval_((?:base|warmstart|final|step\d+)(?:_train)?)(_sampled)?\.jsonl")
STEP_FILE = re.compile(r"step_\d+\.jsonl")
TASK_GROUP = re.compile(r"-eval-([a-z_]+)-\d+$")
"""The group of an eval task id, as the domains' generators write them: ``calc-eval-heldout-0003``
is ``heldout``; ``seen``; swe's ``kind`` / ``project`` (held-out mutation kinds and projects)."""


ALL = "all"


def task_group(task_id: str) -> str | None:
    match = TASK_GROUP.search(task_id)
    return match.group(1) if match else None


def groups_of(tasks: Sequence[str]) -> dict[str, list[str]]:
    """``all`` and each task group with at least one of ``tasks``."""
    out: dict[str, list[str]] = {ALL: list(tasks)}
    for task in tasks:
        group = task_group(task)
        if group is not None:
            out.setdefault(group, []).append(task)
    return out


@dataclass
class EvalPoint:
    phase: str
    step: int
    per_task: dict[str, dict[str, float]]
    """metric -> task -> the mean over the task's scored episodes."""
    lost: int
    """Episodes lost to infrastructure or a failed evaluator (not scored)."""


@dataclass
class Trial:
    """One training run's results (a trial of the learning bench)."""

    arm: str
    seed: int
    run_dir: str
    evals: dict[str, EvalPoint]
    """``<phase>`` (greedy) and ``<phase>_sampled`` -> its eval."""
    step_s: dict[int, float]
    """Training step -> its wall seconds (rollout, update and weight sync)."""
    trained: list[str] = field(default_factory=list)
    """The tasks its training steps sampled (sorted; empty in records written before it was kept)."""

    def train_s(self, step: int) -> float:
        """Wall seconds of training up to the end of ``step``."""
        return sum(s for k, s in self.step_s.items() if k <= step)


def phase_step(phase: str, steps: int) -> int:
    phase = phase.removesuffix("_train")
    if phase in ("base", "warmstart"):
        return 0
    if phase == "final":
        return steps
    return int(phase.removeprefix("step"))


def read_eval(path: str, phase: str, step: int) -> EvalPoint:
    by_task: dict[str, list[Trajectory]] = {}
    lost = 0
    with open(path, "rb") as f:
        for line in f:
            t = msgspec.json.decode(line, type=Trajectory)
            if t.status != "ok" or t.score is None:
                lost += 1
                continue
            by_task.setdefault(t.task_id, []).append(t)
    per_task = {
        name: {task: sum(value(t) for t in ts) / len(ts) for task, ts in by_task.items()}
        for name, value in per_episode().items()
    }
    return EvalPoint(phase, step, per_task, lost)


def read_run(run_dir: str, steps: int, arm: str = "", seed: int = 0) -> Trial:
    """A finished run's evals and step times (``FileNotFoundError`` when it has none); ``arm`` and
    ``seed`` name it in a bench."""
    folder = os.path.join(run_dir, "trajectories")
    evals, trained = {}, set()
    for name in sorted(os.listdir(folder)):
        if STEP_FILE.fullmatch(name):
            trained |= task_ids(os.path.join(folder, name))
        match = EVAL_FILE.fullmatch(name)
        if match:
            phase = match.group(1)
            evals[phase + (match.group(2) or "")] = read_eval(
                os.path.join(folder, name), phase, phase_step(phase, steps)
            )
    step_s: dict[int, float] = {}
    with open(os.path.join(run_dir, "metrics.jsonl"), "rb") as f:
        for line in f:
            row = json.loads(line)
            if row.get("phase") == "train" and "step_s" in row:
                step_s[int(row["step"])] = float(row["step_s"])
    return Trial(arm, seed, run_dir, evals, step_s, sorted(trained))


class _TaskId(msgspec.Struct):
    task_id: str


def task_ids(path: str) -> set[str]:
    """The tasks of a trajectory file (only each line's ``task_id`` is decoded)."""
    decoder = msgspec.json.Decoder(_TaskId)
    with open(path, "rb") as f:
        return {decoder.decode(line).task_id for line in f if line.strip()}


CLOSING_METRICS = (
    ("success", "success"),
    ("valid_call", "valid first call"),
    ("tool_adoption", "tool adoption"),
)


def closing_table(trial: Trial) -> str:
    """``train.py``'s last table: each greedy eval's success, valid first calls and tool adoption
    with standard errors over tasks, then final minus warm start paired by task, overall and per
    task group (what ``launch.bench.learning`` reports across seeds)."""
    from policies.stats import mean_and_stderr

    phases = [p for p in ("base", "warmstart", "final") if p in trial.evals]
    tasks = (
        sorted(set.intersection(*(set(trial.evals[p].per_task["success"]) for p in phases))) if phases else []
    )
    if not tasks:
        return "no eval scored a task: nothing to tabulate"
    lines = [f"{'eval':<12}" + "".join(f"{header:>20}" for _, header in CLOSING_METRICS)]
    for phase in phases:
        cells = []
        for metric, _ in CLOSING_METRICS:
            mean, se = mean_and_stderr(trial.evals[phase].per_task[metric][i] for i in tasks)
            cells.append(f"{f'{mean:.2f} ± {se:.2f}':>20}")
        lines.append(f"{phase:<12}" + "".join(cells))
    if "warmstart" in phases and "final" in phases:
        final, start = (trial.evals[p].per_task["success"] for p in ("final", "warmstart"))
        gains = []
        for group, members in groups_of(tasks).items():
            mean, se = mean_and_stderr(final[i] - start[i] for i in members)
            gains.append(f"{group} ({len(members)}) {mean:+.2f} ± {se:.2f}")
        lines.append("RL - warm start, success paired by task: " + ", ".join(gains))
    on_train = train_task_gains(trial)
    if on_train:
        lines.append(
            "on training tasks (train.eval_train_tasks), final - start paired by task: "
            + ", ".join(f"{g} ({n}) {mean:+.2f} ± {se:.2f}" for g, (n, mean, se) in on_train.items())
        )
    return "\n".join(lines)


def start_train_phase(evals: Mapping[str, object]) -> str | None:
    """The eval of the starting policy on training tasks: ``warmstart_train``, else ``base_train``."""
    return next((p for p in ("warmstart_train", "base_train") if p in evals), None)


def train_task_gains(trial: Trial) -> dict[str, tuple[int, float, float]]:
    """Group -> (tasks, mean, SE) of final minus start success on the evaluated training tasks, paired
    by task; empty when the run did not evaluate on training tasks."""
    from policies.stats import mean_and_stderr

    start = start_train_phase(trial.evals)
    if start is None or "final_train" not in trial.evals:
        return {}
    final, first = (trial.evals[p].per_task["success"] for p in ("final_train", start))
    tasks = sorted(set(final) & set(first))
    trained = set(trial.trained)
    groups = {ALL: tasks, "trained": [i for i in tasks if i in trained]}
    return {
        group: (len(members), *mean_and_stderr(final[i] - first[i] for i in members))
        for group, members in groups.items()
        if members
    }
