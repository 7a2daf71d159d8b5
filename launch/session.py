"""A run's actors and what every phase of it shares: one start-up for training and evaluation.

``open_session(cfg, run_id, learner=...)`` starts Ray (in-process, or the cluster named by
``ray.address`` / ``RAY_ADDRESS``) and the actors, reaps what dead runs left, and yields a
``Session``: the config, tokenizer, actors, reporter, and the episode settings derived from the
config (system prompt, limits, sampling, recorder), so an evaluation runs the agent exactly as
training did. On exit, however it exits, every actor and environment is shut down.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import msgspec

from actors.placement import Actors, join_env_nodes, start_actors, stop_actors
from actors.rollout import RolloutPipeline, env_config_resolver
from launch.console import configure_console, ray_init_options
from launch.report import Reporter
from policies.engine import Engine
from policies.react import DEFAULT_SYSTEM_PROMPT, EpisodeLimits
from policies.thought import THINK_INSTRUCTIONS
from policies.tokens import ChatRecorder
from policies.types import SamplingConfig
from policies.vision import load_vision
from specs.config import RunConfig
from specs.env import EnvConfig
from specs.servers import load_server_registries
from specs.task import TaskSpec


def system_prompt(cfg: RunConfig) -> str:
    """The domain's system prompt (or the default); a Thought-MDP agent is asked to think first."""
    prompt = cfg.domain.system_prompt or DEFAULT_SYSTEM_PROMPT
    if cfg.rollout.reasoning_format == "think":
        prompt = f"{prompt.rstrip()} {THINK_INSTRUCTIONS}"
    return prompt


def episode_limits(cfg: RunConfig, max_turns: int | None = None) -> EpisodeLimits:
    return EpisodeLimits(
        max_turns=max_turns or cfg.rollout.max_turns,
        max_new_tokens=cfg.rollout.max_new_tokens,
        max_context_tokens=cfg.rollout.max_context_tokens,
        tool_timeout_s=cfg.rollout.tool_timeout_s,
    )


class Session:
    """The live run: config, tokenizer, actors, reporter, and the episode settings."""

    def __init__(
        self, cfg: RunConfig, run_id: str, tokenizer: Any, actors: Actors, reporter: Reporter
    ) -> None:
        self.cfg, self.run_id, self.tokenizer = cfg, run_id, tokenizer
        self.actors, self.reporter = actors, reporter
        registry = load_server_registries([d.servers for d in cfg.domains])
        self.env_config_for = env_config_resolver(registry, cfg.env)
        stop_ids = (tokenizer.eos_token_id,)
        self.greedy = SamplingConfig(temperature=0.0, stop_token_ids=stop_ids)
        self.sampling = SamplingConfig(
            temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p, stop_token_ids=stop_ids
        )
        self.vision = load_vision(cfg.model.path)
        """A vision-language policy's image expansion (``None``: a text policy)."""
        self.limits = episode_limits(cfg)
        self.eval_limits = episode_limits(cfg, cfg.eval_max_turns)
        self.domain_of: dict[str, str] = {}
        """``task_id -> domain`` in a run that mixes domains (``cfg.mix``): evals report each domain."""

    async def join_env_nodes(self, step: int) -> int:
        """Env nodes that came up since the run began (``env.node_resource``) join it; how many
        nodes host environments now."""
        tokens = self.tokenizer.all_special_tokens
        for node, handles in await join_env_nodes(self.actors.envs, self.cfg, self.run_id, tokens):
            self.actors.handles += handles
            print(f"step {step}: env node {node[:12]} joined", flush=True)
        return len(self.actors.envs.loads)

    def recorder(self) -> ChatRecorder:
        """A fresh recorder for one episode (and for replaying one: ``policies.replay``)."""
        return ChatRecorder(
            self.tokenizer, reasoning_format=self.cfg.rollout.reasoning_format, vision=self.vision
        )

    def pipeline(
        self, engine_for: Callable[[TaskSpec], Engine] | None = None, *, evaluation: bool = False
    ) -> RolloutPipeline:
        """A rollout pipeline over the run's actors (the generator unless ``engine_for`` says);
        ``evaluation``: under the evaluations' observation rule (``train.eval_observation_rule``)."""
        rollout = self.cfg.rollout
        rule = rollout.observation_rule
        if evaluation and self.cfg.train.eval_observation_rule is not None:
            rule = self.cfg.train.eval_observation_rule
        return RolloutPipeline(
            pool=self.actors.pool,
            gateway=self.actors.gateway,
            evaluator=self.actors.evaluator,
            env_config_for=self.env_config_for,
            engine_for=engine_for or self._generator,
            recorder_factory=self.recorder,
            acquire_workers=rollout.acquire_workers,
            run_workers=rollout.run_workers,
            eval_workers=rollout.eval_workers,
            system_prompt=system_prompt(self.cfg),
            gateway_options=rollout.gateway_options(),
            observation_rule=rule,
            retries=rollout.retries,
            group_timeout_s=rollout.group_timeout_s,
            hook_modules=self.cfg.hook_modules,
        )

    def _generator(self, task: TaskSpec) -> Engine:
        return self.actors.generator

    async def prewarm(self, tasks: Sequence[TaskSpec]) -> None:
        """Create ``env.prewarm`` environments for each configuration more than one of ``tasks``
        (the training tasks) shares."""
        if not self.cfg.env.prewarm:
            return
        configs: dict[str, EnvConfig] = {}
        uses: Counter[str] = Counter()
        for task in tasks:
            config = self.env_config_for(task)
            configs[config.key()] = config
            uses[config.key()] += 1
        for key, n in uses.items():
            if n > 1:  # a configuration of its own task only is created on demand
                warmed = await self.actors.pool.prewarm(configs[key], self.cfg.env.prewarm)
                print(f"prewarmed {warmed} {self.cfg.env.backend} environment(s) for {n} tasks", flush=True)


@contextlib.asynccontextmanager
async def open_session(
    cfg: RunConfig,
    run_id: str,
    *,
    learner: bool,
    generator: bool = True,
    verbose: bool = False,
    wandb: bool = True,
) -> AsyncIterator[Session]:
    """Start Ray (unless it runs already) and the run's actors; yield the session; shut all down.
    ``learner=False`` (an evaluation) starts no learner, ``generator=False`` (the scripted expert's
    evaluation) no generator; ``wandb=False`` logs nowhere but the table."""
    log_path = configure_console(cfg.run_dir, verbose)
    import ray
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(cfg.model.path)
    owns_ray = not ray.is_initialized()
    if owns_ray:
        ray.init(address=cfg.ray.address, num_cpus=cfg.ray.num_cpus, **ray_init_options(log_path, verbose))
    try:
        async with contextlib.AsyncExitStack() as cleanup:
            if not wandb:
                cfg = msgspec.structs.replace(cfg, wandb=msgspec.structs.replace(cfg.wandb, mode="disabled"))
            reporter = Reporter(cfg, run_id)
            cleanup.callback(reporter.close)
            actors = start_actors(
                cfg, run_id, tokenizer.all_special_tokens, learner=learner, generator=generator
            )
            cleanup.push_async_callback(stop_actors, actors)
            await actors.pool.reap_leftovers()
            yield Session(cfg, run_id, tokenizer, actors, reporter)
    finally:
        if owns_ray:
            ray.shutdown()
