"""Evaluate a model on a task split with the training pipeline: per-domain metrics with standard errors.

    python launch/eval.py --model PATH [--config FILE] [--split eval|train] [--limit N]
        [--samples K] [--temperature T] [--by domain|category|none] [--output FILE]
        [--observation-rule JSON] [key.path=value ...]
    python launch/eval.py --policy expert [--config FILE] [--limit N] ...

``--policy expert`` runs the domain's scripted expert (``domain.expert``) instead of a model, through
the same environments, servers, gateway, evaluator and token recording, with no generator started:
it shows a domain is solvable (and what it costs) before any GPU is spent. Its tokens are counted
with ``--model``'s tokenizer, default the config's ``model.path``.

``--model`` is a Hugging Face model directory (the demo's ``.cache/models/SmolLM2-135M-Instruct``),
a run's checkpoint directory (``<run_dir>/checkpoint``: ``Learner.save_checkpoint`` writes the
DeepSpeed state there and a loadable HF model, tokenizer and chat template included, in its ``hf/``)
or a run directory (its ``checkpoint/hf``). A bare weights file (``Learner.export_weights``: no
config, no tokenizer) and a DeepSpeed-only checkpoint are refused with what to pass instead.

The episodes run exactly as in training: the config's environments, gateway, evaluator, vLLM
generator, agent loop, system prompt and recorder (``rollout.reasoning_format``), and limits
(turns: ``train.eval_max_turns``, else ``rollout.max_turns``), without a learner. Every task of the
split (the first ``--limit``) is run once greedily (temperature 0, paper 000 App. A "Evaluation
protocol"); ``--samples K`` adds ``K`` sampled episodes per task at ``--temperature`` (default
``rollout.temperature``) and ``rollout.top_p``.

Output: per run (greedy, sampled) a table with one row per domain and one over all tasks, each cell
``mean±SE`` (``policies.metrics``: SE clustered by task); a domain is a task's ``category`` up to its
first ``/`` (``--by category``: the whole category; ``none``: the overall row only). The numbers go
to ``<run_dir>/eval-<split>-<model>.json`` (``--output`` elsewhere), the episodes to
``<run_dir>/trajectories/eval-<split>-<model>-<run>.jsonl``. Exit status: 0; 2 for bad input (an
argument, the config, a task file, the model path), said before anything starts; 1 when every
episode was lost to infrastructure; 130 when interrupted.

The last line printed is ``success=<mean> se=<se> lost=<n>``: the greedy run's success over all
tasks, its standard error, and the episodes lost to infrastructure or a failed evaluator.

``--observation-rule`` (a JSON ``specs.observation_rule.ObservationRule``; default: the config's
``rollout.observation_rule``) is applied at every step as in training, recorded in the JSON, and each
episode's logged rule records are replayed against its tokens (``policies.replay``): the count of
episodes whose log does not rebuild them is reported as ``replay_mismatch`` (expected 0). Not here:
pass@k, and several models side by side (run it per model).
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import sys
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from launch.eval_report import format_table, rows_json, summary_line, write_json  # noqa: E402
from policies.metrics import OVERALL, metrics_with_stderr  # noqa: E402  (no ML imports)
from specs.config import RunConfig, load_run_config  # noqa: E402
from specs.errors import SpecError  # noqa: E402
from specs.observation_rule import ObservationRule  # noqa: E402

GROUPINGS = ("domain", "category", "none")
POLICIES = ("model", "expert")

# -- arguments ---------------------------------------------------------------------------------------


def _int_at_least(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {value}")
        return value

    return parse


def _temperature(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:  # also refuses nan
        raise argparse.ArgumentTypeError(
            f"expected a temperature > 0 for sampled repeats, got {text} (the greedy run is always done)"
        )
    return value


def _observation_rule(text: str) -> ObservationRule:
    try:
        return msgspec.json.decode(text, type=ObservationRule)
    except msgspec.DecodeError as e:  # ValidationError included: unknown fields, wrong types, validators
        fields = ", ".join(f.name for f in msgspec.structs.fields(ObservationRule))
        raise argparse.ArgumentTypeError(f"{e}; expected a JSON object with fields among: {fields}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="eval.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", help="run config YAML (default: the embedded CPU demo)")
    parser.add_argument(
        "--policy",
        choices=POLICIES,
        default="model",
        help="model: the --model, sampled by vLLM (default); expert: the domain's scripted expert",
    )
    parser.add_argument(
        "--model",
        help="HF model dir, a run's checkpoint dir, or a run dir (required with --policy model; "
        "with --policy expert only its tokenizer is used, default model.path)",
    )
    parser.add_argument(
        "--split", choices=("eval", "train"), default="eval", help="task split (default: eval)"
    )
    parser.add_argument(
        "--limit", type=_int_at_least(1), help="evaluate only the first N tasks (default: all)"
    )
    parser.add_argument(
        "--samples", type=_int_at_least(0), default=0, help="K sampled episodes per task besides greedy"
    )
    parser.add_argument(
        "--temperature", type=_temperature, help="of the sampled repeats (default: rollout's)"
    )
    parser.add_argument("--by", choices=GROUPINGS, default="domain", help="table rows (default: domain)")
    parser.add_argument("--output", help="JSON path (default: <run_dir>/eval-<split>-<model>.json)")
    parser.add_argument(
        "--observation-rule",
        type=_observation_rule,
        help="ObservationRule JSON (default: rollout.observation_rule)",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="show Ray actor logs and library warnings (else in the run's log)",
    )
    parser.add_argument("overrides", nargs="*", help="config overrides, key.path=value")
    return parser


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parsed and cross-checked arguments; a bad one exits with status 2 and says which and why."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.policy == "model" and not args.model:
        parser.error("argument --model is required with --policy model (the default)")
    if args.policy == "expert" and args.samples:
        parser.error("argument --samples: the scripted expert is deterministic; sample a --policy model")
    if args.temperature is not None and args.samples == 0:
        parser.error("argument --temperature: applies to sampled repeats only; give --samples K >= 1 too")
    bad = [o for o in args.overrides if "=" not in o]
    if bad:
        parser.error(
            f"unrecognized argument(s) {' '.join(bad)}: expected --options or key.path=value overrides"
        )
    return args


# -- the model and the tasks -------------------------------------------------------------------------


def resolve_model_dir(path: str) -> str:
    """The HF model directory that ``--model path`` names (module docstring); ``SpecError`` otherwise."""

    def refuse(message: str) -> SpecError:
        return SpecError(path, "--model", message)

    if not os.path.exists(path):
        raise refuse("no such file or directory; expected a HF model dir, a checkpoint dir or a run dir")
    if os.path.isfile(path):
        hint = (
            "a bare weights file (Learner.export_weights) has no config or tokenizer; pass the checkpoint "
            "dir whose hf/ save_checkpoint wrote"
            if path.endswith(".safetensors")
            else "it is a file"
        )
        raise refuse(f"{hint}; expected a directory with config.json")
    for candidate in (path, os.path.join(path, "hf"), os.path.join(path, "checkpoint", "hf")):
        if os.path.isfile(os.path.join(candidate, "config.json")):
            return os.path.normpath(candidate)
    if os.path.isfile(os.path.join(path, "latest")):
        raise refuse(
            "a DeepSpeed checkpoint without its hf/ export (Learner.save_checkpoint writes both); "
            "expected <checkpoint>/hf/config.json"
        )
    raise refuse("no config.json in it, in hf/ or in checkpoint/hf/; expected a HF model dir")


def model_tag(model_dir: str) -> str:
    """A short file-name-safe name of a model dir: its name; for ``<run>/checkpoint[/hf]``, ``<run>-checkpoint``."""
    parts = [p for p in os.path.normpath(os.path.abspath(model_dir)).split(os.sep) if p] or ["model"]
    if parts[-1] == "hf" and len(parts) > 1:
        parts.pop()
    name = f"{parts[-2]}-checkpoint" if parts[-1] == "checkpoint" and len(parts) > 1 else parts[-1]
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "model"


def task_domains(
    tasks: Sequence[Any], by: str, mixed: Mapping[str, Sequence[Any]] | None = None
) -> dict[str, str] | None:
    """``task_id -> row`` for ``metrics_with_stderr``: ``category`` up to its first ``/`` (``domain``;
    in a run that mixes domains, ``mixed``, the domain each task came from), the whole ``category``,
    or ``None`` (``none``: the overall row only)."""
    if by not in GROUPINGS:
        raise ValueError(f"task_domains: by={by!r}; expected one of {GROUPINGS}")
    if by == "none":
        return None
    if by == "domain" and mixed is not None:
        return {t.instance_id: name for name, group in mixed.items() for t in group}
    return {t.instance_id: t.category if by == "category" else t.category.split("/", 1)[0] for t in tasks}


class EvalPlan(msgspec.Struct, frozen=True, kw_only=True):
    """Everything decided before an actor starts (no ML import needed to build it)."""

    cfg: RunConfig
    """The run config, ``model.path`` set to ``model_dir``."""
    policy: str
    """``model`` or ``expert`` (``POLICIES``)."""
    expert: Any
    """The scripted expert's ``respond`` with ``--policy expert`` (``launch.experts``), else ``None``."""
    model_dir: str
    tag: str
    split: str
    task_file: str
    tasks: list[Any]
    domains: dict[str, str] | None
    samples: int
    temperature: float
    output: str
    observation_rule: ObservationRule | None


def plan_eval(args: argparse.Namespace) -> EvalPlan:
    """Load and check the config, the model path and the split's tasks; ``SpecError`` on bad input."""
    from launch.experts import run_expert
    from specs.check import interleaved, load_split

    cfg = load_run_config(args.config, args.overrides)
    model_dir = resolve_model_dir(args.model or cfg.model.path)
    cfg = msgspec.structs.replace(cfg, model=msgspec.structs.replace(cfg.model, path=model_dir))
    if args.observation_rule is not None:
        rollout = msgspec.structs.replace(cfg.rollout, observation_rule=args.observation_rule)
        cfg = msgspec.structs.replace(cfg, rollout=rollout)
    split = load_split(cfg, args.split, args.limit)  # with mix: the first --limit of each domain
    tasks = interleaved(split)
    task_file = " + ".join(d.eval_tasks if args.split == "eval" else d.tasks for d in cfg.domains)
    if not tasks:
        raise SpecError(task_file, "tasks", "no task in the file; expected at least one to evaluate")
    expert = run_expert(cfg, split) if args.policy == "expert" else None
    tag = "expert" if args.policy == "expert" else model_tag(model_dir)
    return EvalPlan(
        cfg=cfg,
        policy=args.policy,
        model_dir=model_dir,
        tag=tag,
        split=args.split,
        task_file=task_file,
        tasks=tasks,
        domains=task_domains(tasks, args.by, split if cfg.mix else None),
        expert=expert,
        samples=args.samples,
        temperature=args.temperature if args.temperature is not None else cfg.rollout.temperature,
        output=args.output or os.path.join(cfg.run_dir, f"eval-{args.split}-{tag}.json"),
        observation_rule=cfg.rollout.observation_rule,
    )


# -- the document ------------------------------------------------------------------------------------


def report(plan: EvalPlan, runs: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The JSON document: what was evaluated, how, and each run (its ``rows`` as ``rows_json``)."""
    rule = plan.observation_rule
    return {
        "model": plan.model_dir,
        "policy": plan.policy,
        "split": plan.split,
        "task_file": plan.task_file,
        "tasks": len(plan.tasks),
        "domain": " + ".join(d.name for d in plan.cfg.domains),
        "max_turns": plan.cfg.eval_max_turns,
        "observation_rule": None if rule is None else msgspec.to_builtins(rule),
        "runs": {name: {**run, "rows": rows_json(run["rows"])} for name, run in runs.items()},
    }


# -- running -----------------------------------------------------------------------------------------


async def run_eval(plan: EvalPlan, verbose: bool = False) -> dict[str, dict[str, Any]]:
    """Run the greedy (and sampled) episodes and print each run's table; ``{run: {..., "rows": Rows}}``."""
    from launch.session import open_session
    from policies.replay import check_replay
    from policies.scripted import ScriptedEngine
    from policies.types import SamplingConfig

    cfg = plan.cfg
    run_id = f"eval-{cfg.run_name}-{uuid.uuid4().hex[:6]}"
    out: dict[str, Any] = {}
    expert = plan.expert is not None
    async with open_session(
        cfg, run_id, learner=False, generator=not expert, verbose=verbose, wandb=False
    ) as s:
        engine_for = functools.partial(ScriptedEngine, s.tokenizer, plan.expert) if expert else None
        experts = ", ".join(str(d.expert) for d in cfg.domains)
        who = f"the expert {experts}" if expert else f"model {plan.model_dir}"
        print(f"eval {run_id}: {who}, {len(plan.tasks)} {plan.split} task(s)", flush=True)
        runs = [("greedy", 1, s.greedy)]
        if plan.samples:
            sampled = SamplingConfig(
                temperature=plan.temperature, top_p=cfg.rollout.top_p, stop_token_ids=s.greedy.stop_token_ids
            )
            runs.append(("sampled", plan.samples, sampled))
        for name, per_task, sampling in runs:
            with s.reporter.progress(f"{name} episodes", len(plan.tasks)) as advance:
                groups = await s.pipeline(engine_for).collect(
                    plan.tasks, per_task, sampling, s.eval_limits, advance
                )
            trajectories = [t for g in groups for t in g.trajectories]
            path = s.reporter.write_trajectories(
                f"eval-{plan.split}-{plan.tag}-{name}", trajectories, s.tokenizer
            )
            reachable = (
                {t.instance_id: bool(t.reference_calls) for t in plan.tasks} if cfg.gui_servers else None
            )
            rows = metrics_with_stderr(trajectories, plan.domains, cfg.gui_servers, reachable)
            lost = sum(lost_by_status(trajectories).values())
            mismatched = 0
            if cfg.rollout.observation_rule is not None:
                for t in trajectories:
                    if t.status == "ok" and (problem := check_replay(t, s.recorder)):
                        print(f"eval: {problem}", file=sys.stderr)
                        mismatched += 1
            print(
                f"\n{name} (temperature {sampling.temperature:g}, {per_task} per task, {lost} lost):",
                flush=True,
            )
            print(format_table(rows), flush=True)
            out[name] = {
                "temperature": sampling.temperature,
                "episodes_per_task": per_task,
                "lost": lost_by_status(trajectories),
                "replay_mismatch": mismatched,
                "trajectories": path,
                "rows": rows,
            }
    return out


def lost_by_status(trajectories: Sequence[Any]) -> dict[str, int]:
    """Episodes lost to infrastructure or a failed evaluator, by status."""
    return dict(Counter(t.status for t in trajectories if t.status != "ok"))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        plan = plan_eval(args)
    except SpecError as e:  # the config, the model path or a task file: say where, start nothing
        print(f"eval: bad input: {e}", file=sys.stderr)
        return 2
    try:
        import anyio

        runs = anyio.run(run_eval, plan, args.verbose)
    except KeyboardInterrupt:  # run_eval has already destroyed every environment and actor
        print("interrupted: environments and actors shut down", file=sys.stderr)
        return 130
    write_json(plan.output, report(plan, runs))
    print(summary_line({name: run["rows"] for name, run in runs.items()}), flush=True)
    print(f"eval: wrote {plan.output}", flush=True)
    greedy = runs["greedy"]
    print(closing_line(greedy["rows"], sum(greedy["lost"].values())), flush=True)
    if all(run["rows"][OVERALL]["episodes"][0] == 0 for run in runs.values()):
        print("eval: every episode was lost; see the log above", file=sys.stderr)
        return 1
    return 0


def closing_line(rows: Mapping[str, Any], lost: int) -> str:
    """``success=<mean> se=<se> lost=<n>``: the overall success of a run, for scripts to read."""
    mean, se = rows[OVERALL]["success"] if "success" in rows[OVERALL] else (float("nan"), float("nan"))
    return f"success={mean:.4f} se={se:.4f} lost={lost}"


if __name__ == "__main__":
    sys.exit(main())
