"""Domain episodes for tests: run a domain's tasks through the real pipeline, record one episode as
a JSON fixture, and replay a recording.

``run_domain(config, tasks, backend, root, tokenizer)`` runs episodes exactly as a run of that
config does (its servers, hooks, evaluator scoring, system prompt, recorder and limits) on the
real ``EnvPool`` / ``McpGateway`` / ``Evaluator`` in this process, no Ray; the policy is the
config's scripted expert unless ``engine_for`` says otherwise.

A recording (``record`` writes it) keeps the config, the task file and id, and the whole
``Trajectory``. ``replay`` checks it three ways and returns what differs (empty: it replays):

1. its messages rebuild its tokens exactly (``policies.replay.check_replay``: ids, trainable and
   reasoning masks, segment starts);
2. the recorded model turns, fed back token for token (``RecordedEngine``), drive a fresh episode
   in a fresh environment through the real servers: the same tokens come out, the same tool calls
   (name, arguments, ok) are made;
3. the evaluator gives the recorded verdicts (func, op, passed; success and the task reward).

A tool whose output holds the wall-clock time (the browser names its saved snapshots by it) cannot
give the same tokens twice: its recording lists those ``volatile`` patterns (``--volatile REGEX``),
and check 2 then holds the model turns to the same tokens and the messages to the same text with
the patterns' matches blanked.

    python -m tests.episodes --config launch/configs/swe.yaml --task swe-eval-0003 \\
        --out tests/data/episodes/swe-eval-0003.json [--backend bwrap] [--split eval] [--volatile REGEX]
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import msgspec

from actors.env_pool import EnvPool
from actors.evaluator import Evaluator
from actors.mcp_gateway import McpGateway
from actors.rollout import RolloutPipeline, env_config_resolver
from launch.session import episode_limits, system_prompt
from policies.engine import Engine
from policies.replay import check_replay, turn_tokens
from policies.scripted import ScriptedEngine
from policies.tokens import ChatRecorder
from policies.types import Generation, PromptImage, SamplingConfig
from specs.config import RunConfig, load_run_config
from specs.registry import resolve_import
from specs.scoring import scoring_for
from specs.servers import load_server_registry
from specs.task import TaskSpec, load_tasks
from specs.templates import environment
from specs.trajectory import Trajectory
from tests.backends import make_backend, run_id

EPISODE_TIMEOUT_S = 300.0


class Recording(msgspec.Struct, kw_only=True):
    """One recorded episode and what it needs to run again."""

    config: str
    """The run config it ran under (its domain's servers, hooks, recorder, limits)."""
    task_file: str
    task_id: str
    backend: str
    trajectory: Trajectory
    volatile: list[str] = msgspec.field(default_factory=list)
    """Regexes of tool output that differs run to run by nature (a file name with the wall-clock
    time in it). With any, the replay compares the model turns token for token and the messages
    with those matches blanked, instead of every token."""


class RecordedEngine:
    """An ``Engine`` that returns a recorded trajectory's model turns, token for token, in order."""

    def __init__(self, recorded: Trajectory) -> None:
        self._turns = [
            (recorded.token_ids[a:b], recorded.logprobs[a:b], v)
            for (a, b), v in zip(turn_tokens(recorded), recorded.versions, strict=True)
        ]
        self._next = 0

    async def generate(
        self, prompt_ids: list[int], sampling: SamplingConfig, images: Sequence[PromptImage] = ()
    ) -> Generation:
        if self._next >= len(self._turns):
            raise RuntimeError(f"the recording has {len(self._turns)} model turns; a turn more was asked for")
        ids, logprobs, version = self._turns[self._next]
        self._next += 1
        return Generation(token_ids=list(ids), logprobs=list(logprobs), version=version, finish_reason="stop")


def config_tasks(cfg: RunConfig, split: str = "eval") -> list[TaskSpec]:
    """The tasks of a config's split, templates filled as a run fills them."""
    path = cfg.domain.eval_tasks if split == "eval" else cfg.domain.tasks
    return load_tasks(path, environment(cfg.domain.task_vars))


async def run_domain(
    cfg: RunConfig,
    tasks: Sequence[TaskSpec],
    backend: str,
    root: Path,
    tokenizer: Any,
    engine_for: Callable[[TaskSpec], Engine] | None = None,
    *,
    group_size: int = 1,
    max_live: int = 2,
) -> list[Trajectory]:
    """Episodes of ``tasks`` under ``cfg`` on ``backend`` (environments under ``root``); every
    environment is destroyed before it returns. Run from the project root (relative venv paths)."""
    expert = resolve_import(cfg.domain.expert or "", "domain.expert") if engine_for is None else None
    pool = EnvPool(
        make_backend(backend, root), run_id(), max_live=max_live, hook_modules=cfg.domain.hook_modules
    )
    try:
        async with McpGateway.running(
            keep_images=cfg.rollout.keep_images, max_episode_images=cfg.rollout.max_episode_images
        ) as gateway:
            pipeline = RolloutPipeline(
                pool=pool,
                gateway=gateway,
                evaluator=Evaluator(cfg.domain.hook_modules, scoring_for(cfg)),
                env_config_for=env_config_resolver(
                    load_server_registry(cfg.domain.servers),
                    msgspec.structs.replace(cfg.env, backend=backend),
                ),
                engine_for=engine_for or (lambda task: ScriptedEngine(tokenizer, expert, task)),  # type: ignore[arg-type]
                recorder_factory=lambda: ChatRecorder(
                    tokenizer, reasoning_format=cfg.rollout.reasoning_format
                ),
                system_prompt=system_prompt(cfg),
                observation_rule=cfg.rollout.observation_rule,
                acquire_workers=1,
                run_workers=max_live,
                eval_workers=1,
            )
            sampling = SamplingConfig(temperature=0.0, stop_token_ids=(tokenizer.eos_token_id,))
            with anyio.fail_after(EPISODE_TIMEOUT_S * max(1, len(tasks) * group_size // max_live)):
                groups = await pipeline.collect(list(tasks), group_size, sampling, episode_limits(cfg))
    finally:
        await pool.shutdown()
    return [t for g in groups for t in g.trajectories]


def save(path: Path, recording: Recording) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(msgspec.json.format(msgspec.json.encode(recording)) + b"\n")


def load(path: Path) -> Recording:
    return msgspec.json.decode(path.read_bytes(), type=Recording)


async def record(
    config: str,
    task_id: str,
    out: Path,
    backend: str,
    split: str,
    tokenizer: Any,
    root: Path,
    volatile: Sequence[str] = (),
) -> Trajectory:
    """Run the config's expert on one task and save the episode (refused unless it succeeded)."""
    cfg = load_run_config(config)
    task = next((t for t in config_tasks(cfg, split) if t.instance_id == task_id), None)
    if task is None:
        raise SystemExit(f"{config}: no task {task_id!r} in the {split} split")
    (episode,) = await run_domain(cfg, [task], backend, root, tokenizer)
    if episode.status != "ok" or not episode.succeeded:
        raise SystemExit(
            f"{task_id}: the expert's episode did not succeed ({episode.status}: {episode.error})"
        )
    task_file = cfg.domain.eval_tasks if split == "eval" else cfg.domain.tasks
    save(
        out,
        Recording(
            config=config,
            task_file=task_file,
            task_id=task_id,
            backend=backend,
            trajectory=episode,
            volatile=list(volatile),
        ),
    )
    return episode


async def replay(recording: Recording, backend: str, root: Path, tokenizer: Any) -> list[str]:
    """What differs when ``recording`` is replayed (module docstring); ``[]`` when nothing does."""
    cfg = load_run_config(recording.config)
    recorded = recording.trajectory
    problems: list[str] = []

    def recorder() -> ChatRecorder:
        return ChatRecorder(tokenizer, reasoning_format=cfg.rollout.reasoning_format)

    if (problem := check_replay(recorded, recorder)) is not None:
        problems.append(f"tokens: {problem}")
    tasks = load_tasks(recording.task_file, environment(cfg.domain.task_vars))
    task = next((t for t in tasks if t.instance_id == recording.task_id), None)
    if task is None:
        return [*problems, f"{recording.task_file}: no task {recording.task_id!r} any more"]
    (again,) = await run_domain(cfg, [task], backend, root, tokenizer, lambda _: RecordedEngine(recorded))
    if again.status != "ok":
        return [*problems, f"replayed episode: {again.status}: {again.error}"]
    if recording.volatile:
        problems.extend(_volatile_differences(again, recorded, recording.volatile))
    elif again.token_ids != recorded.token_ids or again.trainable != recorded.trainable:
        first = next(
            (i for i, (a, b) in enumerate(zip(again.token_ids, recorded.token_ids, strict=False)) if a != b),
            None,
        )
        problems.append(
            f"replayed tokens differ from the recording (first at {first}; {len(again.token_ids)} vs {len(recorded.token_ids)})"
        )
    calls = [(c.name, c.arguments, c.ok) for c in again.tool_calls]
    if calls != [(c.name, c.arguments, c.ok) for c in recorded.tool_calls]:
        problems.append(f"replayed tool calls differ: {calls}")
    if again.score is None or recorded.score is None:
        return [*problems, "an episode has no score"]
    verdicts = [(v.func, v.op, v.passed) for v in again.score.verdicts]
    if verdicts != [(v.func, v.op, v.passed) for v in recorded.score.verdicts]:
        problems.append(
            f"verdicts differ: {verdicts} vs {[(v.func, v.op, v.passed) for v in recorded.score.verdicts]}"
        )
    if (again.score.success, again.score.task) != (recorded.score.success, recorded.score.task):
        problems.append(f"score differs: {again.score} vs {recorded.score}")
    return problems


def _volatile_differences(again: Trajectory, recorded: Trajectory, volatile: Sequence[str]) -> list[str]:
    """The model turns must be the same tokens; the messages the same text but for ``volatile``."""
    problems: list[str] = []
    turns = [again.token_ids[a:b] for a, b in turn_tokens(again)]
    if turns != [recorded.token_ids[a:b] for a, b in turn_tokens(recorded)]:
        problems.append("replayed model turns differ from the recording")
    patterns = [re.compile(p) for p in volatile]

    def blanked(messages: list[dict[str, Any]]) -> list[str]:
        texts = [str(m.get("content", "")) for m in messages]
        for pattern in patterns:
            texts = [pattern.sub("<volatile>", t) for t in texts]
        return texts

    mine, theirs = blanked(again.messages), blanked(recorded.messages)
    if mine != theirs:
        first = next((i for i, (a, b) in enumerate(zip(mine, theirs, strict=False)) if a != b), None)
        problems.append(
            f"replayed messages differ from the recording beyond its volatile patterns (first: {first})"
        )
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", required=True)
    parser.add_argument("--task", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--backend", default="bwrap", choices=("local", "bwrap", "docker"))
    parser.add_argument("--split", default="eval", choices=("eval", "train"))
    parser.add_argument(
        "--volatile",
        action="append",
        default=[],
        metavar="REGEX",
        help="tool output that differs run to run by nature (Recording.volatile); repeatable",
    )
    args = parser.parse_args(argv)
    import tempfile

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(load_run_config(args.config).model.path)
    with tempfile.TemporaryDirectory(prefix="mcprl-record-") as root:
        episode = anyio.run(
            record,
            args.config,
            args.task,
            args.out,
            args.backend,
            args.split,
            tokenizer,
            Path(root),
            args.volatile,
        )
    print(
        f"recorded {args.task}: {episode.num_turns} turns, {len(episode.tool_calls)} tool calls -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
