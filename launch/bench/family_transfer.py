"""Did RL carry to the task families it trained on? Recorded trials' eval gains by family.

    python -m launch.bench.family_transfer launch/bench/records/apps-tasks8-ws64*/grpo-s*

Each argument is a finished trial's ``trial.json`` or the run directory holding it. A task's family
is its ``category`` in the task files the trial's config names (``domain`` or ``mix``: ``tasks`` and
``eval_tasks``). Per trial, each eval task falls in one of three groups:

- ``trained``: a task its RL steps sampled is of the same family;
- ``untrained``: a family of the training file that its steps did not sample;
- ``new``: a family no training task has (the held-out families).

Per trial and group: the paired gain, final minus warm-start greedy success, over the group's tasks.
Pooled: the mean of the trials' group means with its SE over trials (each trial one observation;
the groups differ from trial to trial, so the learning bench's ``seeds × tasks`` SE does not apply),
and beside it the mean and SE over all (trial, task) cells. With curation the trained families
are the ones the warm start half solves, so set against ``untrained`` this is a comparison
among observed groups, not a randomised one.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from launch.bench.compare_trials import read_record  # noqa: E402
from launch.bench.learning_report import cell  # noqa: E402
from launch.bench.trial_files import DONE, results_of  # noqa: E402
from launch.run_results import Trial  # noqa: E402
from policies.stats import mean_and_stderr  # noqa: E402
from specs.errors import SpecError  # noqa: E402
from specs.task import TaskSpec, load_tasks  # noqa: E402
from specs.templates import environment  # noqa: E402

GROUPS = ("trained", "untrained", "new")


def config_tasks(record: Mapping[str, Any], file: str) -> tuple[list[TaskSpec], list[TaskSpec]]:
    """The training and eval tasks of the files a trial record's config names, loaded as training
    loads them (``domain.task_vars`` over the process environment)."""
    config = record.get("config")
    if not isinstance(config, dict) or not isinstance(config.get("domain"), dict):
        raise ValueError(f"{file}: no field config.domain; expected the trial's run config")
    domains = config.get("mix") or [config["domain"]]

    def load(key: str) -> list[TaskSpec]:
        return [t for d in domains for t in load_tasks(d[key], environment(d.get("task_vars")))]

    try:
        return load("tasks"), load("eval_tasks")
    except (KeyError, TypeError):
        raise ValueError(f"{file}: a domain without tasks and eval_tasks in config") from None


def gains_by_group(
    trial: Trial, family: Mapping[str, str], train_families: set[str]
) -> dict[str, list[float]]:
    """Group -> the paired gains (final − warm start) of the eval tasks both evals scored."""
    warm, final = (trial.evals[p].per_task["success"] for p in ("warmstart", "final"))
    trained = {family[t] for t in trial.trained if t in family}
    out: dict[str, list[float]] = {g: [] for g in GROUPS}
    for task in sorted(set(warm) & set(final)):
        if task not in family:
            raise ValueError(f"{trial.run_dir}: eval task {task} is in no task file of its config")
        of = family[task]
        group = "trained" if of in trained else "untrained" if of in train_families else "new"
        out[group].append(final[task] - warm[task])
    return out


def read(path: str) -> tuple[Trial, dict[str, list[float]]]:
    """A trial and its eval gains by group."""
    file, record = read_record(path)
    trial = results_of(record["results"], file)
    if not trial.trained:
        raise ValueError(f"{file}: no trained tasks recorded; expected a record written since they are kept")
    missing = [p for p in ("warmstart", "final") if p not in trial.evals]
    if missing:
        raise ValueError(f"{file}: no {' or '.join(missing)} eval")
    train, evals = config_tasks(record, file)
    family = {t.instance_id: t.category for t in (*train, *evals)}
    return trial, gains_by_group(trial, family, {t.category for t in train})


def pooled(rows: Sequence[dict[str, list[float]]]) -> dict[str, dict[str, Any]]:
    """Per group: trials with tasks in it, its mean ± SE over trials and over (trial, task) cells."""
    out = {}
    for g in GROUPS:
        per_trial = [r[g] for r in rows if r[g]]
        if not per_trial:
            continue
        cells = [x for gains in per_trial for x in gains]
        out[g] = {
            "trials": len(per_trial),
            "cells": len(cells),
            "over_trials": mean_and_stderr(sum(gains) / len(gains) for gains in per_trial),
            "over_cells": mean_and_stderr(cells),
        }
    return out


def format_rows(names: Sequence[str], rows: Sequence[dict[str, list[float]]]) -> str:
    width = max(len(n) for n in names) + 2
    lines = [f"{'eval gain (final - warm start)':<{width}}" + "".join(f"{g:>18}" for g in GROUPS)]
    for name, row in zip(names, rows, strict=True):
        lines.append(
            f"{name:<{width}}"
            + "".join(
                f"{f'{sum(row[g]) / len(row[g]):+.2f} ({len(row[g])})' if row[g] else '-':>18}"
                for g in GROUPS
            )
        )
    pool = pooled(rows)
    for label, key in (("pooled, SE over trials", "over_trials"), ("pooled, SE over cells", "over_cells")):
        lines.append(
            f"{label:<{width}}"
            + "".join(f"{cell(pool[g][key], signed=True) if g in pool else '-':>18}" for g in GROUPS)
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m launch.bench.family_transfer", description=__doc__.split("\n")[0]
    )
    parser.add_argument("trials", nargs="+", help="trial.json files or run directories")
    args = parser.parse_args(argv)
    try:
        rows = [read(p) for p in args.trials]
    except (ValueError, SpecError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    names = [p.removesuffix(DONE).rstrip("/") or p for p in args.trials]
    print(format_rows(names, [r for _, r in rows]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
