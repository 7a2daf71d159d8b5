"""A trial's run directory across attempts: its start, its record, and going on from a checkpoint.

A trial of ``launch.bench.learning`` is one ordinary training run; these files in its run directory
let a later command know what ran there: ``STARTED`` as it starts, ``DONE`` (``trial.json``) once it
finished, with its config, code and results. A finished trial with the same config is not run again
(``finished``); an unfinished one with step checkpoints goes on from its last (``resumable``), also
when the new plan only has more steps (``lengthens``, ``lengthen``). A lengthened trial keeps the
shorter one's record, so that a plan with its fewer steps still finds it (``record_of``). The
config a trial runs with is the planned one, but for an ablation's second arm, which starts from
the warm start the first arm's run directory kept (``with_shared_warm_start``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import TYPE_CHECKING, Any

from specs.config import RunConfig

if TYPE_CHECKING:
    from launch.bench.learning import Arm, Bench
    from launch.run_results import Trial

DONE = "trial.json"
"""Written into a trial's run directory once its run finished, with its config and the code it ran
(``code_version``): the bench does not run it again while the config is the same (``finished``), and
says so when the code has changed since. It also keeps the trial's results (``results``: per eval,
each metric per task, and the steps' seconds), so that this file alone carries a finished trial:
copy ``<out>/*/trial.json`` to another machine (or commit them) and a later command there reuses
those trials and adds seeds."""

STARTED = "trial.started.json"
"""Written into a trial's run directory as its run starts, with its config: an attempt that was
interrupted after a step checkpoint is resumed only by a bench that plans the same trial."""

NOT_TRAINING = {
    "train": ("checkpoint_every", "keep_checkpoints", "resume"),
    "warmstart": ("save",),
    "learner": ("gradient_checkpointing",),
}
"""Config fields that change where a run logs, what it keeps or the memory it takes, not what it
trains (with ``wandb``): two configs that differ only there are the same trial (a trial stopped by
the learner running out of memory goes on from its last step with ``learner.gradient_checkpointing``)."""


def record_of(cfg: RunConfig) -> dict[str, object] | None:
    """The record of ``cfg``'s trial: the ``trial.<steps>steps.json`` that a trial lengthened past
    ``cfg``'s steps kept (``lengthen``), else ``trial.json``; None when it has none or an unreadable
    one (the trial runs again)."""
    import json

    shorter = os.path.join(cfg.run_dir, f"trial.{cfg.train.steps}steps.json")
    try:
        with open(shorter if os.path.isfile(shorter) else os.path.join(cfg.run_dir, DONE)) as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def trained_by(config: object) -> object:
    """``config`` (a ``to_dict`` of a run config) as it would be written today (``as_today``), without
    ``wandb`` and the ``NOT_TRAINING`` fields."""
    if not isinstance(config, dict):
        return config
    kept = {k: v for k, v in as_today(config).items() if k != "wandb"}
    for section, fields in NOT_TRAINING.items():
        if isinstance(kept.get(section), dict):
            kept[section] = {k: v for k, v in kept[section].items() if k not in fields}
    return kept


def as_today(config: dict[str, Any]) -> dict[str, Any]:
    """A recorded config with the fields added since it was written at their defaults, so that a new
    option left at its default does not make every recorded trial run again; as recorded when it
    no longer loads (a field removed or retyped since: not the same trial)."""
    import msgspec

    from specs.config import to_dict

    try:
        return to_dict(msgspec.convert(config, RunConfig, strict=False))
    except (msgspec.ValidationError, ValueError):
        return config


def finished(cfg: RunConfig) -> bool:
    """Whether the trial of ``cfg`` finished with this config (``trained_by``)."""
    from specs.config import to_dict

    config = (record_of(cfg) or {}).get("config")
    return isinstance(config, dict) and trained_by(config) == trained_by(to_dict(cfg))


def resumable(cfg: RunConfig) -> tuple[str, int] | None:
    """The step checkpoint an earlier attempt at ``cfg``'s trial left, and the steps that attempt
    planned, when it started with this config (``STARTED``) or with this config but fewer steps (a
    trial being lengthened, ``lengthens``); else None (the trial starts afresh)."""
    planned = lengthens(started_config(cfg), cfg)
    if planned is None:
        return None
    checkpoint = last_checkpoint(cfg)
    return None if checkpoint is None else (checkpoint, planned)


def started_config(cfg: RunConfig) -> object:
    """The config the last attempt in ``cfg``'s run directory started with (``STARTED``), or None."""
    import json

    try:
        with open(os.path.join(cfg.run_dir, STARTED)) as f:
            started = json.load(f)
    except (OSError, ValueError):
        return None
    return started.get("config") if isinstance(started, dict) else None


def last_checkpoint(cfg: RunConfig) -> str | None:
    """The last step checkpoint in ``cfg``'s checkpoint directory; None if there is none or it is
    damaged (the trial starts afresh rather than fail the bench)."""
    from launch.checkpoints import resolve_resume

    try:
        return resolve_resume("auto", cfg.checkpoint_dir)
    except (OSError, ValueError):
        return None


def lengthens(earlier: object, cfg: RunConfig) -> int | None:
    """The steps ``earlier`` (a recorded config) planned when ``cfg`` is the same trial trained for
    as many steps or more; else None. With a constant learning rate and the task stream and
    curation in the step checkpoint, going on from a shorter run's last step is the longer run."""
    steps = steps_of_same_trial(earlier, cfg)
    return steps if steps is not None and steps <= cfg.train.steps else None


def longer_attempt(cfg: RunConfig) -> str | None:
    """What in ``cfg``'s run directory is ``cfg``'s trial planned for more steps, which running ``cfg``
    afresh there would delete: a finished run of it that kept no record at ``cfg``'s steps
    (``record_of``), or an unfinished attempt at it with a step checkpoint to go on from. None when
    there is neither."""
    steps = steps_of_same_trial((record_of(cfg) or {}).get("config"), cfg)
    if steps is not None and steps > cfg.train.steps:
        return (
            f"this trial run for {steps} steps, with no record at {cfg.train.steps}"
            f" (trial.{cfg.train.steps}steps.json)"
        )
    steps = steps_of_same_trial(started_config(cfg), cfg)
    if steps is not None and steps > cfg.train.steps and (checkpoint := last_checkpoint(cfg)) is not None:
        return f"an unfinished attempt at this trial for {steps} steps, to go on from {checkpoint}"
    return None


def steps_of_same_trial(config: object, cfg: RunConfig) -> int | None:
    """The steps ``config`` (a recorded config) planned when it is ``cfg``'s trial but for its number
    of steps (``trained_by``); else None."""
    from specs.config import to_dict

    train = config.get("train") if isinstance(config, dict) else None
    steps = train.get("steps") if isinstance(train, dict) else None
    if not isinstance(steps, int):
        return None
    as_planned = {**config, "train": {**train, "steps": cfg.train.steps}}  # type: ignore[dict-item]
    return steps if trained_by(as_planned) == trained_by(to_dict(cfg)) else None


def with_shared_warm_start(bench: Bench, arm: Arm, seed: int, cfg: RunConfig) -> RunConfig:
    """``cfg``, starting from the first arm's warm start of ``seed`` when the ablation shares it
    and that trial kept one (``warmstart.from_run``), or when this trial already finished from it
    (its record, carried without the warm start's weights); else unchanged (its own warm start)."""
    import msgspec

    from launch.checkpoints import PROGRESS
    from launch.shared_warmstart import WARMSTART_DIR

    if bench.ablation is None or not bench.ablation.shares_warm_start or arm == bench.arms[0]:
        return cfg
    first = next(c for a, s, c in bench.trials if a == bench.arms[0] and s == seed)
    shared = msgspec.structs.replace(
        cfg, warmstart=msgspec.structs.replace(cfg.warmstart, from_run=first.run_dir)
    )
    kept = os.path.isfile(os.path.join(first.run_dir, WARMSTART_DIR, PROGRESS))
    return shared if kept or finished(shared) else cfg


def mark_started(cfg: RunConfig, code: str) -> None:
    """Write ``STARTED`` into ``cfg``'s run directory: this config, run by ``code``, starts there."""
    import msgspec

    from specs.config import to_dict

    with open(os.path.join(cfg.run_dir, STARTED), "wb") as f:
        f.write(msgspec.json.encode({"code": code, "config": to_dict(cfg)}))


def lengthen(run_dir: str, steps: int, resumed_at: int) -> None:
    """A run planned for ``steps`` steps made the start of a longer one, going on after step
    ``resumed_at``. When that is its last step, its final evals become that step's (``eval_final*``
    -> ``eval_step<steps>*``, in its trajectories and ``metrics.jsonl``: what a longer run with an
    eval at that step writes); from an earlier step they are of a policy the longer run will not
    have, and go. Its record (``DONE``) becomes ``trial.<steps>steps.json``: the longer one's replaces it."""
    import json

    kept = resumed_at == steps

    def at_step(name: str, prefix: str) -> str:  # eval_final_train.jsonl -> eval_step6_train.jsonl
        return f"{prefix}step{steps}{name[len(prefix) + len('final') :]}"

    folder = os.path.join(run_dir, "trajectories")
    for name in os.listdir(folder) if os.path.isdir(folder) else ():
        if name.startswith("eval_final"):
            path = os.path.join(folder, name)
            if kept:
                os.replace(path, os.path.join(folder, at_step(name, "eval_")))
            else:
                os.remove(path)
    metrics = os.path.join(run_dir, "metrics.jsonl")
    if os.path.isfile(metrics):
        with open(metrics) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        with open(metrics + ".tmp", "w") as f:
            for row in rows:
                phase = str(row.get("phase", ""))
                if phase.startswith("eval/final"):
                    if not kept:
                        continue
                    row["phase"] = at_step(phase, "eval/")
                f.write(json.dumps(row) + "\n")
        os.replace(metrics + ".tmp", metrics)
    with contextlib.suppress(FileNotFoundError):  # kept, should the longer trial not finish
        os.replace(os.path.join(run_dir, DONE), os.path.join(run_dir, f"trial.{steps}steps.json"))


def code_version() -> str:
    """The commit the bench runs (``+changes`` when tracked files differ from it); ``unknown``
    outside a git checkout."""
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            raise OSError(done.stderr.strip())
        return done.stdout.strip()

    try:
        head = git("rev-parse", "--short=12", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head + ("+changes" if changed else "")


def recorded_code(cfg: RunConfig) -> str | None:
    """The code version a finished trial recorded (None for a trial from before it was kept)."""
    code = (record_of(cfg) or {}).get("code")
    return code if isinstance(code, str) else None


def recorded_trial(cfg: RunConfig, arm: str, seed: int) -> Trial:
    """A finished trial's results: those its ``trial.json`` keeps (read from its run directory,
    ``read_run``, for a trial recorded before the file kept them)."""
    from launch import run_results

    results = (record_of(cfg) or {}).get("results")
    if results is None:
        return run_results.read_run(cfg.run_dir, cfg.train.steps, arm, seed)
    kept = results_of(results, os.path.join(cfg.run_dir, DONE))
    return dataclasses.replace(kept, arm=arm, seed=seed, run_dir=cfg.run_dir)


def results_of(results: object, path: str) -> Trial:
    """The ``results`` a trial record (``path``) keeps, as a ``Trial``."""
    import msgspec

    from launch import run_results

    try:
        return msgspec.convert(results, run_results.Trial, strict=False)
    except msgspec.ValidationError as e:
        raise ValueError(f"{path}: field results: {e}; expected a trial's evals and step seconds") from e
