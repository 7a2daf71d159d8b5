"""Two sets of recorded trials against each other, paired by seed and task: final evals.

An ablation of ``launch.bench.learning`` compares its arms itself; this compares trials that ran
apart, e.g. two runs from one kept warm start (``warmstart.from_run``) that differ in one setting::

    python -m launch.bench.compare_trials \\
        --reference runs/learning/apps-tasks8-lr5e-6/grpo-s2 \\
        --treatment runs/learning/apps-tasks8-cutfails/grpo-s2 --metrics success truncated tool_calls

Each argument is a trial's ``trial.json`` or the run directory holding it; the seeds of both sides
must be the same, and the tasks compared are those every trial scored in its final eval (a metric
of ``policies.metrics.per_episode`` that a trial's record does not hold, one added since, is named
and left out). For the eval tasks and, where every trial evaluated them
(``train.eval_train_tasks``), the training tasks: each side's final mean with its SE, the start
(the warm start, or the base model) of the reference, and treatment − reference.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from launch.bench.learning_report import (  # noqa: E402
    by_group,
    cell,
    common_tasks,
    difference,
    table,
    train_task_groups,
)
from launch.bench.trial_files import DONE, results_of  # noqa: E402
from launch.run_results import Trial, groups_of, start_train_phase  # noqa: E402
from policies.metrics import per_episode  # noqa: E402


def read_record(path: str) -> tuple[str, dict[str, Any]]:
    """``(file, record)``: a ``trial.json`` (or the run directory holding one), with its results."""
    file = os.path.join(path, DONE) if os.path.isdir(path) else path
    try:
        with open(file) as f:
            record = json.load(f)
    except OSError as e:
        raise ValueError(f"{file}: {e.strerror}; expected a finished trial's {DONE}") from None
    except ValueError as e:
        raise ValueError(f"{file}: not JSON ({e}); expected a finished trial's {DONE}") from None
    if not isinstance(record, dict) or "results" not in record:
        raise ValueError(f"{file}: no field results; expected a trial record with its results")
    return file, record


def read_trial(path: str) -> Trial:
    """The trial a ``trial.json`` (or the run directory holding one) records, with its seed."""
    file, record = read_record(path)
    return results_of(record["results"], file)


def by_seed(trials: Sequence[Trial], side: str) -> dict[int, Trial]:
    seeds = [t.seed for t in trials]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"--{side}: seeds {seeds}; expected one trial per seed")
    return {t.seed: t for t in trials}


def has_scores(trials: Sequence[Trial], phase: str, metric: str, tasks: Sequence[str]) -> bool:
    return all(
        phase in t.evals and set(tasks) <= set(t.evals[phase].per_task.get(metric, {})) for t in trials
    )


def compare(
    reference: Sequence[Trial], treatment: Sequence[Trial], metrics: Sequence[str]
) -> list[dict[str, Any]]:
    """Per task set (eval tasks, training tasks): its groups and, per metric, each side's final
    mean ± SE, the reference's start, and treatment − reference paired by seed and task."""
    known = per_episode()
    unknown = [m for m in metrics if m not in known]
    if unknown:
        raise ValueError(f"--metrics: unknown {', '.join(unknown)}; expected some of {', '.join(known)}")
    ref, treat = by_seed(reference, "reference"), by_seed(treatment, "treatment")
    if set(ref) != set(treat):
        raise ValueError(f"seeds differ: reference {sorted(ref)}, treatment {sorted(treat)}")
    refs, treats = [ref[s] for s in sorted(ref)], [treat[s] for s in sorted(ref)]
    everyone = [*refs, *treats]
    sets = []
    eval_start = "warmstart" if all("warmstart" in t.evals for t in refs) else "base"
    for name, start, final in (
        ("eval tasks", eval_start, "final"),
        ("training tasks", start_train_phase(refs[0].evals), "final_train"),
    ):
        if not all(final in t.evals for t in everyone):
            continue
        tasks = common_tasks(everyone, (final,))
        if not tasks:
            raise ValueError(f"{name}: no task was scored in every trial's {final} eval")
        groups = train_task_groups(everyone, tasks) if final == "final_train" else groups_of(tasks)
        rows, missing = {}, []
        for metric in metrics:
            if not all(metric in t.evals[final].per_task for t in everyone):
                missing.append(metric)  # a metric added after a record was written
                continue
            a, b = table(refs, final, metric, tasks), table(treats, final, metric, tasks)
            row = {"reference": by_group(a, groups), "treatment": by_group(b, groups)}
            if start is not None and has_scores(refs, start, metric, tasks):
                row["start"] = by_group(table(refs, start, metric, tasks), groups)
            row["difference"] = by_group(difference(b, a), groups)
            rows[metric] = row
        sets.append(
            {
                "tasks": name,
                "start": start,
                "groups": {g: len(ts) for g, ts in groups.items()},
                "metrics": rows,
                "missing": missing,
            }
        )
    if not sets:
        raise ValueError("no final eval in every trial: expected finished trials")
    return sets


def format_comparison(sets: Sequence[dict[str, Any]], seeds: Sequence[int]) -> str:
    lines = [f"treatment - reference, final evals, paired by seed and task (seeds {list(seeds)})"]
    for s in sets:
        counts = s["groups"]
        # the metric column widens for a long name (hallucinated_tools) rather than run into the next
        width = max([16, *(len(metric) + 2 for metric in s["metrics"])])
        lines.append(
            f"{s['tasks']:<{width}}{'':<24}" + "".join(f"{f'{g} ({n})':>16}" for g, n in counts.items())
        )
        for metric, row in s["metrics"].items():
            for label, key, signed in (
                (f"start ({s['start']})", "start", False),
                ("reference", "reference", False),
                ("treatment", "treatment", False),
                ("difference", "difference", True),
            ):
                if key in row:
                    values = row[key]
                    lines.append(
                        f"{metric:<{width}}{label:<24}"
                        + "".join(f"{cell(values[g], signed):>16}" for g in counts)
                    )
        if s["missing"]:
            lines.append(f"not in every trial's record: {', '.join(s['missing'])}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m launch.bench.compare_trials", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--reference", nargs="+", required=True, help="trial.json files or run directories")
    parser.add_argument("--treatment", nargs="+", required=True, help="the same seeds' trials to compare")
    parser.add_argument(
        "--metrics", nargs="+", default=["success"], help="per-episode metrics (policies.metrics)"
    )
    args = parser.parse_args(argv)
    try:
        reference = [read_trial(p) for p in args.reference]
        treatment = [read_trial(p) for p in args.treatment]
        sets = compare(reference, treatment, args.metrics)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(format_comparison(sets, sorted(t.seed for t in reference)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
