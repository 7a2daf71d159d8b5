"""The learning bench's numbers, read back from what its training runs wrote.

Each trial's results, read by ``launch.run_results.read_run`` from its run directory when it
finished (per eval, each metric per task; the steps' wall seconds), come from its ``trial.json``
(``launch.bench.trial_files.recorded_trial``); then per arm the ``seeds × tasks`` tables that
``policies.stats.seeds_and_tasks_mean_and_stderr`` turns into means with standard errors, over the
tasks every trial scored in every eval compared.
Task groups come from the ids the domains' generators write (``calc-eval-heldout-0003``: group
``heldout``; ``TASK_GROUP``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from launch.run_results import ALL, Trial, groups_of, start_train_phase
from policies.stats import mean_and_stderr, seeds_and_tasks_mean_and_stderr

if TYPE_CHECKING:
    from launch.bench.learning import Bench

PHASES = ("base", "warmstart", "final")
Table = dict[int, dict[str, float]]
"""seed -> task -> value."""


def common_tasks(trials: Sequence[Trial], evals: Sequence[str]) -> list[str]:
    """The tasks scored in each of ``evals`` of every trial (a task lost once drops out of all)."""
    sets = [set(t.evals[e].per_task["success"]) for t in trials for e in evals if e in t.evals]
    return sorted(set.intersection(*sets)) if sets else []


def table(trials: Sequence[Trial], key: str, metric: str, tasks: Sequence[str]) -> Table:
    return {t.seed: {i: t.evals[key].per_task[metric][i] for i in tasks} for t in trials}


def difference(a: Table, b: Table) -> Table:
    """``a − b`` cell by cell."""
    return {s: {i: a[s][i] - b[s][i] for i in a[s]} for s in a}


def by_group(values: Table, groups: Mapping[str, Sequence[str]]) -> dict[str, tuple[float, float]]:
    return {
        g: seeds_and_tasks_mean_and_stderr({s: {i: row[i] for i in ts} for s, row in values.items()})
        for g, ts in groups.items()
    }


def analyse(bench: Bench, trials: Sequence[Trial]) -> dict[str, Any]:
    """The bench's numbers as JSON-ready data (``learning.json``)."""
    arms = [a.name for a in bench.arms]
    of_arm = {a: sorted((t for t in trials if t.arm == a), key=lambda t: t.seed) for a in arms}
    seeds = sorted({t.seed for t in trials if all(t.seed in {u.seed for u in of_arm[a]} for a in arms)})
    of_arm = {a: [t for t in ts if t.seed in seeds] for a, ts in of_arm.items()}
    if not seeds:
        raise ValueError(f"no seed has a finished trial of every arm ({', '.join(arms)}) in {bench.out}")
    everyone = [t for ts in of_arm.values() for t in ts]
    missing = [
        f"{t.arm} seed {t.seed}: {p}" for t in everyone for p in ("warmstart", "final") if p not in t.evals
    ]
    if missing:
        raise ValueError(f"trials without the evals compared: {'; '.join(missing)}")
    tasks = common_tasks(everyone, PHASES)
    if not tasks:
        raise ValueError("no eval task was scored in every trial")
    groups = groups_of(tasks)
    steps = bench.trials[0][2].train.steps
    out: dict[str, Any] = {
        "bench": bench.name,
        "seeds": seeds,
        "tasks": len(tasks),
        "groups": {g: len(ts) for g, ts in groups.items()},
        "se": "over tasks and seeds" if len(seeds) > 1 else "over tasks only (one seed)",
        "lost": sum(e.lost for t in everyone for e in t.evals.values()),
        "arms": {},
    }
    for arm, ts in of_arm.items():
        success = {p: table(ts, p, "success", tasks) for p in PHASES if all(p in t.evals for t in ts)}
        row: dict[str, Any] = {
            "phases": {p: by_group(v, groups) for p, v in success.items()},
            "rl_minus_warmstart": by_group(difference(success["final"], success["warmstart"]), groups),
            "curve": curve(ts, tasks, steps),
            "train_s": mean_and_stderr(t.train_s(steps) for t in ts),
        }
        sampled = [p for p in ("warmstart_sampled", "final_sampled") if all(p in t.evals for t in ts)]
        if len(sampled) == 2:
            s_tasks = common_tasks(ts, sampled)
            s = {p: table(ts, p, "success", s_tasks) for p in sampled}
            row["sampled"] = {p: by_group(v, groups_of(s_tasks)) for p, v in s.items()}
        on_train = train_task_rows(ts)
        if on_train is not None:
            row["train_tasks"] = on_train
        out["arms"][arm] = row
    if bench.ablation is not None:
        out["ablation"] = compare_arms(bench, of_arm, tasks, groups, steps)
    return out


def train_task_rows(trials: Sequence[Trial]) -> dict[str, Any] | None:
    """Greedy success on the training tasks every trial evaluated (``train.eval_train_tasks``) at its
    start and at the end, and the paired gain: over ``all`` of them and over those ``trained`` on in
    every trial; ``None`` when a trial did not evaluate so."""
    starts = {start_train_phase(t.evals) for t in trials}
    if len(starts) != 1 or not all("final_train" in t.evals for t in trials):
        return None
    start = starts.pop()
    if start is None:
        return None
    tasks = common_tasks(trials, (start, "final_train"))
    groups = train_task_groups(trials, tasks)
    if not groups:
        return None
    success = {p: table(trials, p, "success", tasks) for p in (start, "final_train")}
    return {
        "groups": {g: len(ts) for g, ts in groups.items()},
        "phases": {p: by_group(v, groups) for p, v in success.items()},
        "rl_minus_start": by_group(difference(success["final_train"], success[start]), groups),
    }


def train_task_groups(trials: Sequence[Trial], tasks: Sequence[str]) -> dict[str, list[str]]:
    """``all`` of ``tasks`` and those ``trained`` on in every trial (a group only when not empty)."""
    trained = set.intersection(*(set(t.trained) for t in trials))
    groups = ((ALL, list(tasks)), ("trained", [i for i in tasks if i in trained]))
    return {g: ts for g, ts in groups if ts}


def curve(trials: Sequence[Trial], tasks: Sequence[str], steps: int) -> list[dict[str, float]]:
    """Success (greedy, all eval tasks) at each eval every trial ran, warm start first."""
    keys = [k for k in trials[0].evals if not k.endswith(("_sampled", "_train")) and k != "base"]
    keys = [k for k in keys if all(k in t.evals for t in trials)]
    points = []
    for key in sorted(keys, key=lambda k: trials[0].evals[k].step):
        step = trials[0].evals[key].step
        mean, se = seeds_and_tasks_mean_and_stderr(table(trials, key, "success", tasks))
        seconds = sum(t.train_s(step) for t in trials) / len(trials)
        points.append({"step": step, "train_s": seconds, "success": mean, "se": se})
    return points


def compare_arms(
    bench: Bench,
    of_arm: Mapping[str, Sequence[Trial]],
    tasks: Sequence[str],
    groups: Mapping[str, Sequence[str]],
    steps: int,
) -> dict[str, Any]:
    """Treatment minus reference, final evals, paired by seed and task, for success and each metric
    the ablation is about (``train_s``: per trial, paired by seed)."""
    assert bench.ablation is not None
    ref, treat = (a.name for a in bench.ablation.arms)
    out: dict[str, Any] = {"name": bench.ablation.name, "reference": ref, "treatment": treat, "metrics": {}}
    for metric in ("success", *bench.ablation.metrics):
        if metric == "train_s":
            a = [t.train_s(steps) for t in of_arm[ref]]
            b = [t.train_s(steps) for t in of_arm[treat]]
            out["metrics"][metric] = {
                ref: mean_and_stderr(a),
                treat: mean_and_stderr(b),
                "difference": mean_and_stderr(y - x for x, y in zip(a, b, strict=True)),
            }
            continue
        a_t, b_t = (table(of_arm[arm], "final", metric, tasks) for arm in (ref, treat))
        out["metrics"][metric] = {
            ref: seeds_and_tasks_mean_and_stderr(a_t),
            treat: seeds_and_tasks_mean_and_stderr(b_t),
            "difference": seeds_and_tasks_mean_and_stderr(difference(b_t, a_t)),
            "difference_by_group": by_group(difference(b_t, a_t), groups),
        }
    return out


def cell(value: Sequence[float], signed: bool = False) -> str:
    mean, se = value
    return f"{mean:+.2f}±{se:.2f}" if signed else f"{mean:.2f}±{se:.2f}"


def format_tables(result: Mapping[str, Any]) -> str:
    groups = list(result["groups"])
    counts = result["groups"]
    header = f"{'arm':<16}{'eval':<20}" + "".join(f"{f'{g} ({counts[g]})':>16}" for g in groups)
    lines = [
        f"learning bench {result['bench']}: seeds {result['seeds']}, {result['tasks']} eval tasks, "
        f"SE {result['se']}, {result['lost']} episodes lost",
        header,
    ]
    for arm, row in result["arms"].items():
        for phase, values in row["phases"].items():
            lines.append(f"{arm:<16}{phase:<20}" + "".join(f"{cell(values[g]):>16}" for g in groups))
        for phase, values in row.get("sampled", {}).items():
            lines.append(
                f"{arm:<16}{phase:<20}"
                + "".join(f"{cell(values[g]) if g in values else '':>16}" for g in groups)
            )
        gain = row["rl_minus_warmstart"]
        lines.append(
            f"{arm:<16}{'RL - warm start':<20}" + "".join(f"{cell(gain[g], True):>16}" for g in groups)
        )
    for arm, row in result["arms"].items():
        on_train = row.get("train_tasks")
        if on_train is None:
            continue
        counts = on_train["groups"]
        lines.append(
            f"{'arm':<16}{'on training tasks':<20}"
            + "".join(f"{f'{g} ({n})':>16}" for g, n in counts.items())
        )
        for phase, values in on_train["phases"].items():
            lines.append(f"{arm:<16}{phase:<20}" + "".join(f"{cell(values[g]):>16}" for g in counts))
        gain = on_train["rl_minus_start"]
        lines.append(f"{arm:<16}{'RL - start':<20}" + "".join(f"{cell(gain[g], True):>16}" for g in counts))
    ablation = result.get("ablation")
    if ablation:
        ref, treat = ablation["reference"], ablation["treatment"]
        lines.append(f"ablation {ablation['name']} (final evals, paired by seed and task):")
        label = f"{treat} - {ref}"
        wide = max(24, len(label) + 2)  # a column apart from the arm before it, whatever the names
        lines.append(f"{'metric':<20}{ref:>16}{treat:>16}{label:>{wide}}")
        for metric, m in ablation["metrics"].items():
            lines.append(
                f"{metric:<20}{cell(m[ref]):>16}{cell(m[treat]):>16}{cell(m['difference'], True):>{wide}}"
            )
    return "\n".join(lines)


def last_line(result: Mapping[str, Any]) -> str:
    first = next(iter(result["arms"].values()))
    d, se = first["rl_minus_warmstart"][ALL]
    return f"rl_minus_warmstart={d:.4f} se={se:.4f} seeds={len(result['seeds'])} tasks={result['tasks']}"


def plot(result: Mapping[str, Any], path: str) -> str:
    """``learning.png``: success vs step and vs training seconds per arm, with ±SE bands."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for arm, row in result["arms"].items():
        points = row["curve"]
        mean = [p["success"] for p in points]
        low = [p["success"] - p["se"] for p in points]
        high = [p["success"] + p["se"] for p in points]
        for ax, x_key in zip(axes, ("step", "train_s"), strict=True):
            xs = [p[x_key] for p in points]
            ax.plot(xs, mean, marker="o", label=arm)
            ax.fill_between(xs, low, high, alpha=0.2)
    axes[0].set_xlabel("RL step (0: warm start)")
    axes[1].set_xlabel("training wall seconds")
    axes[0].set_ylabel("greedy eval success")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle(f"{result['bench']}: seeds {result['seeds']}, {result['tasks']} eval tasks, ±1 SE")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def log_wandb(bench: Bench, result: Mapping[str, Any], png: str) -> None:
    """The bench's own W&B run, in the group of its trials' runs: the table, the curves, the gains."""
    cfg = bench.trials[0][2]
    if cfg.wandb.mode == "disabled":
        return
    import wandb

    run = wandb.init(
        project=cfg.wandb.project,
        entity=cfg.wandb.entity,
        group=bench.name,
        name=f"{bench.name}-bench",
        job_type="bench",
        mode=cfg.wandb.mode,
        dir=bench.out,
        config={"seeds": result["seeds"], "tasks": result["tasks"], "arms": list(result["arms"])},
    )
    rows = [
        [arm, phase, g, *values[g]]
        for arm, row in result["arms"].items()
        for phase, values in (*row["phases"].items(), ("rl_minus_warmstart", row["rl_minus_warmstart"]))
        for g in values
    ]
    run.log(
        {
            "learning/curves": wandb.Image(png),
            "learning/table": wandb.Table(columns=["arm", "eval", "group", "mean", "se"], data=rows),
        }
    )
    for arm, row in result["arms"].items():
        d, se = row["rl_minus_warmstart"][ALL]
        run.summary[f"{arm}/rl_minus_warmstart"], run.summary[f"{arm}/rl_minus_warmstart_se"] = d, se
    run.finish()


def report(bench: Bench) -> str:
    """Read the trials that finished, print the tables, write ``learning.json`` and ``learning.png``
    (and to W&B); returns the bench's last line."""
    from launch.bench.trial_files import finished, recorded_trial, with_shared_warm_start

    trials = []
    for arm, seed, planned in bench.trials:
        cfg = with_shared_warm_start(bench, arm, seed, planned)  # the config it ran with, as run_trials
        if finished(cfg):
            trials.append(recorded_trial(cfg, arm.name, seed))
    result = analyse(bench, trials)
    os.makedirs(bench.out, exist_ok=True)
    with open(os.path.join(bench.out, "learning.json"), "w") as f:
        json.dump(result, f, indent=1)
    png = plot(result, os.path.join(bench.out, "learning.png"))
    print(format_tables(result), flush=True)
    print(f"wrote {os.path.join(bench.out, 'learning.json')} and {png}", flush=True)
    log_wandb(bench, result, png)
    return last_line(result)
