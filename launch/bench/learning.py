"""Does RL beat the warm start? Training runs per seed and arm, measured on the same eval tasks.

    python -m launch.bench.learning [--config FILE] [--seeds K | --seed N] [--steps N] [--quick]
        [--ablation NAME] [--eval-every E] [--out DIR] [key.path=value ...]

Each *trial* is one ordinary training run (``launch/train.py``'s ``train``, nothing bench-only in
it): base eval -> warm start -> eval -> ``N`` GRPO steps (an eval every ``E`` of them) -> eval, all
evals greedy on the config's eval split (plus ``train.eval_samples`` sampled episodes per task when
set). Seeds ``0..K-1`` run each arm; every arm of a seed sees the same tasks, demonstrations and
eval set, and the arms of an ablation start from one warm start per seed: the first arm's, kept
(``warmstart.save``) and taken by the second (``warmstart.from_run``, ``launch.shared_warmstart``),
so that they differ by their RL alone (the second runs its own when the first kept none). The
bench then reads back what the runs wrote (their eval trajectories and step metrics,
``launch.bench.learning_report``) and reports, per arm, success with standard errors (over seeds
and tasks, ``policies.stats.seeds_and_tasks_mean_and_stderr``), overall and per task group
(``seen`` / ``heldout`` templates, from the task ids), the paired per-task difference RL minus warm
start, and for an ablation the paired difference between its arms in success and in the metrics
the ablation is about. Output, in ``--out`` (default ``runs/learning/<config>[-<ablation>]``): a
table on the terminal, ``learning.json``, ``learning.png`` (success vs step and vs training
seconds, with SE bands), the same in a W&B run of its own (the trials' runs are grouped with it),
and each trial's run directory. A trial that finished with the same config is not run again: rerun
the same command to finish an interrupted bench. A trial left unfinished starts afresh, unless it
saved step checkpoints (``train.checkpoint_every=1`` among the overrides): then it goes on from its
last one (``resumable``), so that a trial longer than a session can be finished in the next. A
trial planned with more steps than one that ran (``--steps`` raised, nothing else changed) goes on
from that run's last step checkpoint rather than starting again (``lengthen``): its final eval is
kept as an eval at that step, and the longer trial replaces the shorter, whose record stays for a
plan with its steps (``launch.bench.trial_files``). A plan shorter than a longer run of the trial
(finished without a record at the plan's steps, or unfinished with a step checkpoint) is refused for
that trial rather than deleting it (``longer_attempt``).

The last line: ``rl_minus_warmstart=<d> se=<se> seeds=<k> tasks=<n>`` (the first arm's paired gain).

``--quick``: one seed (the `make demo` setting measured once). ``--seed N``: seed N alone, for
a bench whose seeds take a session each (then ``--seeds K --report-only`` reports them together).
``{seed}`` in an override stands for the trial's seed: ``warmstart.from_run=runs/x/grpo-s{seed}``
starts each seed's RL from that seed's kept warm start of an earlier bench.
Ablations (``ABLATIONS``): two arms each, with the same base overrides:

- ``tool_bonus``: adoption returns with the dense tool bonus off / on (paper 002, Eqs. 3-4).
- ``disentangle``: one scalar outcome reward on every token / masked reasoning and tool families
  with bidirectional gradient surgery (paper 000, Eqs. 9-11), both agents reasoning in ``<think>``
  and warm-started on 32 demonstrations.
- ``observation_rule``: trained with full observations / with the rule, both evaluated under the
  rule (paper 002, §5.3: matched training; ``OBSERVATION_RULE``).
- ``optimizer_reset``: RL going on with the warm start's AdamW moments / from fresh ones
  (``warmstart.reset_optimizer``).
- ``truncated_reward``: an episode cut by the turn limit scored by the evaluators / as failed
  (``algorithm.truncated_reward``): an end-state evaluator rewards loops that made the change.
- ``placement``: colocated / async (success per step and per training second).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from launch.bench.trial_files import (  # noqa: E402  (no ML imports)
    DONE,
    code_version,
    finished,
    lengthen,
    longer_attempt,
    mark_started,
    recorded_code,
    resumable,
    with_shared_warm_start,
)
from specs.config import RunConfig, load_run_config  # noqa: E402
from specs.errors import SpecError  # noqa: E402


@dataclass(frozen=True)
class Arm:
    name: str
    overrides: tuple[str, ...] = ()


@dataclass(frozen=True)
class Ablation:
    """Two arms (reference first), the overrides both share, and the metrics besides success that
    the ablation is about."""

    name: str
    arms: tuple[Arm, Arm]
    common: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()
    shares_warm_start: bool = True
    """The arms differ in their RL alone, so the second starts from the first's warm start of
    the same seed (``warmstart.from_run``) instead of a warm start of its own."""


OBSERVATION_RULE = (
    "rollout.observation_rule.keep_last_costly=1",
    "rollout.observation_rule.costly_chars=1000",
)
"""The rule both arms are evaluated under: every observation of 1000 characters or more but the last
has its body elided (at the default 1500 it would cut nothing on research, whose search results run
~1400 characters and pages ~500: BENCHMARKS.md). One tuple for both arms, so that they cannot drift."""
ABLATIONS: dict[str, Ablation] = {
    a.name: a
    for a in (
        Ablation(
            "tool_bonus",
            (Arm("no_bonus", ("algorithm.tool_bonus=0.0",)), Arm("bonus", ("algorithm.tool_bonus=0.1",))),
            common=("algorithm.returns=adoption",),
            metrics=("tool_adoption", "valid_call"),
        ),
        Ablation(
            "disentangle",
            (
                Arm("scalar"),
                Arm(
                    "masked_surgery",
                    (
                        "algorithm.attribution=masked",
                        "algorithm.reasoning_reward=true",
                        "algorithm.tool_reward=true",
                        "algorithm.surgery=true",
                    ),
                ),
            ),
            # 32 demonstrations: with the demo's 16 the <think> agent's warm start succeeds on no
            # eval task and nearly every sampled group is all-fail (BENCHMARKS.md).
            common=("rollout.reasoning_format=think", "warmstart.demonstrations=32"),
            metrics=("reasoning_tokens", "tool_calls"),
        ),
        Ablation(
            "observation_rule",
            (
                Arm("mismatched", tuple(o.replace("rollout.", "train.eval_", 1) for o in OBSERVATION_RULE)),
                Arm("matched", OBSERVATION_RULE),
            ),
            metrics=("input_tokens",),
            shares_warm_start=False,  # the demonstrations, too, run under the rollout's rule
        ),
        Ablation(
            "optimizer_reset",
            (
                Arm("kept_moments", ("warmstart.reset_optimizer=false",)),
                Arm("fresh_moments", ("warmstart.reset_optimizer=true",)),
            ),
            metrics=("unparsed_calls", "valid_call"),
        ),
        Ablation(
            "truncated_reward",
            (
                Arm("evaluators", ("algorithm.truncated_reward=null",)),
                Arm("cut_fails", ("algorithm.truncated_reward=0.0",)),
            ),
            metrics=("truncated", "tool_calls"),
        ),
        Ablation(
            "placement",
            (Arm("colocated", ("placement=colocated",)), Arm("async", ("placement=async",))),
            metrics=("train_s",),
        ),
    )
}


@dataclass
class Bench:
    """What one bench command runs: ``trials`` in order, each ``(arm, seed, config)``."""

    name: str
    out: str
    arms: tuple[Arm, ...]
    ablation: Ablation | None
    trials: list[tuple[Arm, int, RunConfig]] = field(default_factory=list)


def plan(args: argparse.Namespace) -> Bench:
    """The trials' configs, each loaded and validated before anything runs."""
    config_name = os.path.splitext(os.path.basename(args.config or "demo.yaml"))[0]
    ablation = ABLATIONS[args.ablation] if args.ablation else None
    name = f"{config_name}-{ablation.name}" if ablation else config_name
    out = args.out or os.path.join("runs", "learning", name)
    arms = ablation.arms if ablation else (Arm("grpo"),)
    seeds = (args.seed,) if args.seed is not None else tuple(range(1 if args.quick else args.seeds))
    bench = Bench(name, out, arms, ablation)
    for seed in seeds:
        for arm in arms:
            overrides = [
                *(ablation.common if ablation else ()),
                *arm.overrides,
                *(override.replace("{seed}", str(seed)) for override in args.overrides),
                f"seed={seed}",
                f"output_dir={out}",
                f"run_name={arm.name}-s{seed}",
                f"wandb.group={name}",
            ]
            if args.steps is not None:
                overrides.append(f"train.steps={args.steps}")
            if args.eval_every is not None:
                overrides.append(f"train.eval_every={args.eval_every}")
            if ablation and ablation.shares_warm_start and arm == arms[0]:
                overrides.append("warmstart.save=true")
            cfg = load_run_config(args.config, overrides)
            if not cfg.warmstart.enabled:
                raise SpecError(
                    args.config or "(embedded default config)",
                    "warmstart.enabled",
                    "the learning bench compares RL with the warm start: expected true",
                )
            bench.trials.append((arm, seed, cfg))
    return bench


def run_trials(bench: Bench, verbose: bool) -> list[str]:
    """Run each trial not yet done, one after another; the problems of those that failed."""
    import anyio
    import msgspec

    from launch.checkpoints import read_progress
    from launch.run_results import read_run
    from launch.train import train
    from specs.config import to_dict

    problems = []
    code = code_version()
    for i, (arm, seed, planned) in enumerate(bench.trials, 1):
        cfg = with_shared_warm_start(bench, arm, seed, planned)
        if finished(cfg):
            ran = recorded_code(cfg)
            since = (
                ""
                if ran == code
                else f"; it ran code {ran or 'unrecorded'}, this is {code}: delete that directory to run it again"
            )
            print(
                f"[{i}/{len(bench.trials)}] {arm.name} seed {seed}: done before ({cfg.run_dir}{since})",
                flush=True,
            )
            continue
        in_the_way = longer_attempt(cfg)
        if in_the_way is not None:  # never delete a longer run of a trial to run a shorter copy of it
            problems.append(
                f"{arm.name} seed {seed}: {cfg.run_dir} holds {in_the_way}: running {cfg.train.steps} steps"
                " afresh would delete it; plan its steps, or give another --out"
            )
            print(f"[{i}/{len(bench.trials)}] not run: {problems[-1]}", file=sys.stderr, flush=True)
            continue
        earlier = resumable(cfg)
        if earlier is None:
            print(f"[{i}/{len(bench.trials)}] {arm.name} seed {seed}: {cfg.run_dir}", flush=True)
            shutil.rmtree(cfg.run_dir, ignore_errors=True)  # what an interrupted attempt left: not a result
            os.makedirs(cfg.run_dir)
            mark_started(cfg, code)
            run_cfg = cfg
        else:  # its own warm start and evals are in the run directory already
            checkpoint, earlier_steps = earlier
            longer = earlier_steps < cfg.train.steps
            note = f" (lengthened from {earlier_steps} to {cfg.train.steps} steps)" if longer else ""
            print(
                f"[{i}/{len(bench.trials)}] {arm.name} seed {seed}: going on from {checkpoint}{note}",
                flush=True,
            )
            if longer:
                lengthen(cfg.run_dir, earlier_steps, read_progress(checkpoint).step)
                mark_started(cfg, code)
            run_cfg = msgspec.structs.replace(
                cfg,
                train=msgspec.structs.replace(cfg.train, resume=checkpoint),
                warmstart=msgspec.structs.replace(cfg.warmstart, from_run=None),
            )
        try:
            anyio.run(train, run_cfg, verbose)
            results = read_run(cfg.run_dir, cfg.train.steps, arm.name, seed)  # a run without evals failed
        except Exception as e:  # one failed run is reported, the others still run
            problems.append(f"{arm.name} seed {seed}: {type(e).__name__}: {e}")
            print(f"trial failed: {problems[-1]}", file=sys.stderr, flush=True)
            continue
        with open(os.path.join(cfg.run_dir, DONE), "wb") as f:
            record = {"arm": arm.name, "seed": seed, "code": code, "config": to_dict(cfg), "results": results}
            f.write(msgspec.json.encode(record))
    return problems


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m launch.bench.learning",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", help="run config YAML (default: the embedded CPU demo)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..K-1 per arm (default 3)")
    parser.add_argument("--steps", type=int, help="GRPO steps per trial (default: train.steps)")
    parser.add_argument("--eval-every", type=int, help="an eval every E steps (default: train.eval_every)")
    parser.add_argument("--quick", action="store_true", help="one seed")
    parser.add_argument(
        "--seed",
        type=int,
        help="seed N alone (one seed of a longer bench per session; report all with --seeds)",
    )
    parser.add_argument("--ablation", choices=sorted(ABLATIONS), help="compare the two arms of an ablation")
    parser.add_argument("--out", help="output directory (default runs/learning/<config>[-<ablation>])")
    parser.add_argument("--report-only", action="store_true", help="report the trials already run; run none")
    parser.add_argument("--verbose", action="store_true", help="show Ray actor logs and library warnings")
    parser.add_argument(
        "overrides",
        nargs="*",
        help="config overrides for every trial, key.path=value ({seed}: the trial's seed)",
    )
    args = parser.parse_args(argv)
    if args.seeds < 1 or (args.steps is not None and args.steps < 1):
        parser.error("--seeds and --steps must be >= 1")
    if args.seed is not None and (args.seed < 0 or args.quick):
        parser.error("--seed: expected a seed >= 0, and not with --quick")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        bench = plan(args)
    except SpecError as e:
        print(f"spec error: {e}", file=sys.stderr)
        return 2
    problems = [] if args.report_only else run_trials(bench, args.verbose)
    from launch.bench.learning_report import report

    try:
        last_line = report(bench)
    except ValueError as e:  # nothing to compare: every trial failed, or none has run
        print(f"learning bench: {e}", file=sys.stderr)
        return 1
    for problem in problems:
        print(f"failed trial: {problem}", file=sys.stderr)
    print(last_line, flush=True)
    return 1 if problems else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted: the trials that finished are kept; rerun to go on", file=sys.stderr)
        sys.exit(130)
