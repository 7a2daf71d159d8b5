"""One warm start, several RL runs: a run keeps its warm start, another starts its RL from it.

A run with ``warmstart.save`` writes, after its warm start and that evaluation::

    <run_dir>/warmstart/        the learner's checkpoint (weights, optimizer, RNG, version)
      progress.json             the task stream's position after the demonstrations, written last

A run with ``warmstart.from_run: <that run_dir>`` skips its own base evaluation and warm start:
it loads that checkpoint, serves its weights, continues the task stream from that position (so
its RL steps draw the same tasks in the same order), and reports the other run's base and
warm-start evaluations as its own: their rows are logged again (table, ``metrics.jsonl``, W&B)
and their trajectory files copied, so the run directory reads like one that ran them. Arms of an
ablation compared this way differ by their RL alone, not by a second, differently sampled warm
start (``launch/bench/learning.py`` does it per seed).

``read_saved`` checks the other run before anything starts (``SpecError`` naming the file): the
checkpoint is complete, the evaluations are there (the sampled ones too when this run samples),
and they were made on this run's eval tasks.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from typing import Any

import msgspec

from actors.placement import publish_weights
from launch.checkpoints import Progress, read_progress, write_progress
from launch.run_results import task_ids
from launch.session import Session
from launch.tasks import TaskStream
from specs.errors import SpecError
from specs.task import TaskSpec

WARMSTART_DIR = "warmstart"
ADOPTED_PHASES = ("eval/base", "eval_sampled/base", "warmstart", "eval/warmstart", "eval_sampled/warmstart")
"""The rows of the other run that this run reports as its own, in the order they were logged."""
_FILES = ("demonstrations", "eval_base", "eval_base_sampled", "eval_warmstart", "eval_warmstart_sampled")
TRAIN_PHASES = ("eval/warmstart_train", "eval_sampled/warmstart_train")
"""Its warm start's evals on training tasks (``train.eval_train_tasks``), adopted when on this run's."""
_TRAIN_FILES = ("eval_warmstart_train", "eval_warmstart_train_sampled")


class SavedWarmStart(msgspec.Struct, frozen=True, kw_only=True):
    """A warm start another run kept, checked against this run."""

    run_dir: str
    progress: Progress
    records: list[dict[str, Any]]
    """Its rows of ``ADOPTED_PHASES`` and ``TRAIN_PHASES`` from ``metrics.jsonl``, each with ``phase``
    and ``step``."""

    @property
    def checkpoint(self) -> str:
        return os.path.join(self.run_dir, WARMSTART_DIR)


def read_saved(run_dir: str, eval_tasks: Sequence[TaskSpec], eval_samples: int) -> SavedWarmStart:
    """The warm start ``run_dir`` saved, checked against this run's eval tasks (see the module docstring)."""
    where = "warmstart.from_run"
    checkpoint = os.path.join(run_dir, WARMSTART_DIR)
    try:
        progress = read_progress(checkpoint)
    except ValueError as e:
        raise SpecError(
            run_dir, where, f"no saved warm start (run it with warmstart.save=true): {e}"
        ) from None
    metrics_path = os.path.join(run_dir, "metrics.jsonl")
    try:
        with open(metrics_path, "rb") as f:
            rows = [msgspec.json.decode(line) for line in f if line.strip()]
    except (OSError, msgspec.DecodeError) as e:
        raise SpecError(metrics_path, where, f"unreadable: {e}") from None
    records = [row for row in rows if row.get("phase") in ADOPTED_PHASES + TRAIN_PHASES]
    needed = {"eval/base", "eval/warmstart"} | ({"eval_sampled/warmstart"} if eval_samples else set())
    missing = sorted(needed - {row["phase"] for row in records})
    if missing:
        raise SpecError(metrics_path, where, f"no {', '.join(missing)} row: that run did not evaluate so")
    evaluated = _task_ids(os.path.join(run_dir, "trajectories", "eval_warmstart.jsonl"))
    wanted = sorted({t.instance_id for t in eval_tasks})
    if evaluated != wanted:
        extra, lacking = sorted(set(evaluated) - set(wanted)), sorted(set(wanted) - set(evaluated))
        raise SpecError(
            run_dir,
            where,
            f"its evaluations are not on this run's eval tasks ({len(evaluated)} there, {len(wanted)} here; "
            f"only there: {extra[:3]}, only here: {lacking[:3]})",
        )
    return SavedWarmStart(run_dir=run_dir, progress=progress, records=records)


def _task_ids(path: str) -> list[str]:
    try:
        return sorted(task_ids(path))
    except (OSError, msgspec.DecodeError) as e:
        raise SpecError(path, "warmstart.from_run", f"unreadable eval trajectories: {e}") from None


async def save(s: Session, stream: TaskStream) -> str:
    """Keep this run's warm start in ``<run_dir>/warmstart/``; its directory."""
    directory = os.path.join(s.cfg.run_dir, WARMSTART_DIR)
    await s.actors.trainer.save_checkpoint(directory)
    version = await s.actors.trainer.get_version()
    write_progress(directory, Progress(step=0, version=version, position=stream.position, run_id=s.run_id))
    return directory


async def adopt(
    s: Session, stream: TaskStream, saved: SavedWarmStart, train_evaluated: Sequence[TaskSpec]
) -> dict[str, dict[str, float]]:
    """Start from ``saved``: its learner state served, the stream at its position, its evaluations
    logged and copied as this run's; the ``base`` and ``warmstart`` eval metrics, and
    ``warmstart_train`` when it evaluated the training tasks ``train_evaluated`` of this run (on
    other tasks, or none: this run evaluates them itself)."""
    await s.actors.trainer.load_checkpoint(saved.checkpoint)
    await publish_weights(s.actors)
    stream.position = saved.progress.position
    ours = saved_train_eval_matches(saved.run_dir, train_evaluated)
    copy_trajectories(saved.run_dir, s.reporter.trajectory_dir, train_evals=ours)
    print(
        f"warm start from {saved.checkpoint} (task position {saved.progress.position}); its evals:",
        flush=True,
    )
    results: dict[str, dict[str, float]] = {}
    for record in saved.records:
        if record["phase"] in TRAIN_PHASES and not ours:
            continue
        metrics = {k: v for k, v in record.items() if k not in ("phase", "step")}
        s.reporter.log(record["phase"], record["step"], metrics)
        if record["phase"] in ("eval/base", "eval/warmstart", "eval/warmstart_train"):
            results[record["phase"].removeprefix("eval/")] = metrics
    return results


def saved_train_eval_matches(run_dir: str, train_evaluated: Sequence[TaskSpec]) -> bool:
    """Whether ``run_dir`` evaluated its warm start on exactly the training tasks ``train_evaluated``."""
    path = os.path.join(run_dir, "trajectories", "eval_warmstart_train.jsonl")
    if not train_evaluated or not os.path.exists(path):
        return False
    return _task_ids(path) == sorted({t.instance_id for t in train_evaluated})


def copy_trajectories(run_dir: str, trajectory_dir: str, train_evals: bool = False) -> None:
    """Copy the demonstrations and the base and warm-start eval trajectories of ``run_dir`` (and its
    warm start's evals on training tasks with ``train_evals``)."""
    for name in _FILES + (_TRAIN_FILES if train_evals else ()):
        source = os.path.join(run_dir, "trajectories", f"{name}.jsonl")
        if os.path.exists(source):
            shutil.copyfile(source, os.path.join(trajectory_dir, f"{name}.jsonl"))
