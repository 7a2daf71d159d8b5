"""Train an MCP tool-use agent with GRPO: the one training entry point.

    python launch/train.py [--config FILE] [--verbose] [key.path=value ...]
    ray job submit --working-dir . -- python launch/train.py --config FILE

``train`` reads top to bottom. Parse the config (no ML import before that, so a bad config or
``--help`` answers at once); start Ray and the actors (``launch.session``); measure the base policy
greedily on the eval split; warm-start on expert demonstrations that ran through the very same
pipeline (``launch.phases``), or start from the warm start another run kept
(``warmstart.from_run``, ``launch.shared_warmstart``); run the RL steps (``launch.steps``): each
step's groups are scored by the Evaluator, normalised within each group, trained on, and the new
weights go to the generator, with step checkpoints on a schedule (``train.resume`` continues from
one; the schedule's first, step 0, holds the start: its warm start, evals and curation profile);
measure again (on training tasks too, before and after, with ``train.eval_train_tasks``);
save; shut everything down, whatever happens.

Left out on purpose: an LR schedule (constant LR, so nothing to checkpoint for it), partial-step
updates (a step's whole batch makes each optimizer step: ``learner.epochs_per_step`` of them, one
per pass), and reference-model KL unless the config asks.
"""

from __future__ import annotations

import argparse
import os
import sys
import uuid
from collections.abc import Sequence

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from specs.config import RunConfig, load_run_config  # noqa: E402  (no ML imports)
from specs.errors import SpecError  # noqa: E402


async def train(cfg: RunConfig, verbose: bool = False) -> int:
    from actors.placement import publish_weights
    from launch.checkpoints import read_progress, reference_dir, resolve_resume
    from launch.experts import run_expert
    from launch.phases import evaluate, warm_start
    from launch.run_results import closing_table, read_run
    from launch.session import open_session
    from launch.shared_warmstart import adopt, read_saved, save
    from launch.steps import run_steps, save_step_checkpoint
    from launch.tasks import CuratedTasks, TaskStream
    from specs.check import interleaved, load_split

    run_id = f"{cfg.run_name}-{uuid.uuid4().hex[:6]}"
    # refused now, not mid-run: the tasks of every domain, their servers, ops and hooks, the expert
    train_split = load_split(cfg, "train", cfg.train.curation_pool)
    eval_split = load_split(cfg, "eval", cfg.train.eval_tasks_limit)
    train_tasks, eval_tasks = interleaved(train_split), interleaved(eval_split)
    train_evaluated = train_tasks[: cfg.train.eval_train_tasks]  # learnt where it trained?
    expert = run_expert(cfg, train_split, eval_split) if cfg.warmstart.enabled else None
    stream = TaskStream(train_tasks, cfg.seed)
    resume = resolve_resume(cfg.train.resume, cfg.checkpoint_dir)
    resumed_reference = (  # the KL's reference of a resumed run: the policy its RL started from
        reference_dir(cfg.checkpoint_dir)
        if resume is not None and cfg.warmstart.enabled and cfg.algorithm.needs_reference_model
        else None
    )
    saved = (
        read_saved(cfg.warmstart.from_run, eval_tasks, cfg.train.eval_samples)
        if cfg.warmstart.from_run
        else None
    )

    async with open_session(cfg, run_id, learner=True, verbose=verbose) as s:
        print(
            f"run {run_id}: {' + '.join(d.name for d in cfg.domains)}, model {cfg.model.path}, "
            f"output {cfg.run_dir}",
            flush=True,
        )
        if cfg.mix:
            s.domain_of = {
                t.instance_id: d for split in (train_split, eval_split) for d, ts in split.items() for t in ts
            }
        await s.prewarm(train_tasks)
        tasks = CuratedTasks(s, stream)
        results: dict[str, dict[str, float]] = {}
        first_step = 1

        if saved is not None:  # another run's warm start and its evals (launch.shared_warmstart)
            results |= await adopt(s, stream, saved, train_evaluated)
        elif resume is None:
            results["base"] = await evaluate(s, eval_tasks, "base", 0)
            if expert is not None:
                await warm_start(s, stream, expert)
                results["warmstart"] = await evaluate(s, eval_tasks, "warmstart", 0)
                if cfg.warmstart.save:
                    print(f"warm start kept in {await save(s, stream)}", flush=True)
        else:  # the learner, the policy served, the task stream and curation
            progress = read_progress(resume)
            await s.actors.trainer.load_checkpoint(resume)
            await publish_weights(s.actors)
            stream.position = progress.position
            if tasks.curator is not None and progress.curation is not None:
                tasks.curator.load_state_dict(progress.curation)
            first_step = progress.step + 1
            print(
                f"resumed from {resume}: step {progress.step} done, policy version {progress.version}, "
                f"task position {progress.position}",
                flush=True,
            )

        start = "warmstart" if expert is not None or saved is not None else "base"
        if start == "warmstart" and resume is None:
            await s.actors.trainer.anchor_reference()  # the KL's reference: the policy RL starts from
            if cfg.warmstart.reset_optimizer:
                await s.actors.trainer.reset_optimizer()  # after a kept warm start was saved with its moments
                print("RL starts from fresh optimizer moments (warmstart.reset_optimizer)", flush=True)
        elif resumed_reference is not None:
            await s.actors.trainer.anchor_reference(resumed_reference)
        if train_evaluated and resume is None and f"{start}_train" not in results:
            results[f"{start}_train"] = await evaluate(s, train_evaluated, f"{start}_train", 0)
        if cfg.train.checkpoint_every and resume is None:  # a run stopped later keeps all of the above
            await tasks.prepare(1)  # curation's first profile, kept in the checkpoint too
            await save_step_checkpoint(s, 0, tasks.position(), tasks)

        await run_steps(s, tasks, eval_tasks, first_step)

        results["final"] = await evaluate(s, eval_tasks, "final", cfg.train.steps)
        if train_evaluated:
            results["final_train"] = await evaluate(s, train_evaluated, "final_train", cfg.train.steps)
        await s.actors.trainer.save_checkpoint(cfg.checkpoint_dir)
        s.reporter.summary({f"{phase}/{k}": v for phase, m in results.items() for k, v in m.items()})
    print(closing_table(read_run(cfg.run_dir, cfg.train.steps)), flush=True)
    print(summary_line(results), flush=True)
    return 0


def summary_line(results: dict[str, dict[str, float]]) -> str:
    """``train: base_success=0.00 base_valid_call=0.00 ... final_valid_call=1.00``."""
    parts = [
        f"{phase}_{key}={m.get(key, float('nan')):.2f}"
        for phase, m in results.items()
        for key in ("success", "valid_call")
    ]
    return "train: " + " ".join(parts)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", help="run config YAML (default: the embedded CPU demo)")
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="show Ray actor logs and library warnings (else in the run's log)",
    )
    parser.add_argument("overrides", nargs="*", help="config overrides, key.path=value")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        cfg = load_run_config(args.config, args.overrides)
        import anyio

        return anyio.run(train, cfg, args.verbose)
    except SpecError as e:  # a malformed config, task file or server list: say where, train nothing
        print(f"spec error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # the session has already destroyed every environment and actor
        print("interrupted: environments and actors shut down", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
