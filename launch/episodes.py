"""What training and evaluation share about an episode: its system prompt, limits and pipeline.

``launch/train.py`` and ``launch/eval.py`` build episodes from the same ``RunConfig`` through these
functions, so an evaluation runs the agent exactly as training did (prompt, reasoning format,
gateway options, limits).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from actors.placement import Actors
from actors.rollout import Group, RolloutPipeline
from policies.batch import adoption_samples, rl_samples
from policies.react import DEFAULT_SYSTEM_PROMPT, EpisodeLimits
from policies.replay import check_replay
from policies.thought import THINK_INSTRUCTIONS, reasoning_text
from policies.tokens import ChatRecorder
from policies.types import TrainSample
from specs.trajectory import Trajectory
from rewards.tool_reward import trajectory_tool_reward
from specs.config import RunConfig

logger = logging.getLogger(__name__)


def episode_system_prompt(cfg: RunConfig) -> str:
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


def episode_recorder(cfg: RunConfig, tokenizer: Any) -> ChatRecorder:
    """A fresh recorder for one episode (and for replaying one: ``policies.replay``)."""
    return ChatRecorder(tokenizer, reasoning_format=cfg.rollout.reasoning_format)


def make_pipeline(
    cfg: RunConfig,
    actors: Actors,
    tokenizer: Any,
    env_config_for: Callable[[Any], Any],
    engine_for: Callable[[Any], Any],
) -> RolloutPipeline:
    """A rollout pipeline over the run's actors, configured from ``cfg.rollout``."""
    return RolloutPipeline(
        pool=actors.pool,
        gateway=actors.gateway,
        evaluator=actors.evaluator,
        env_config_for=env_config_for,
        engine_for=engine_for,
        recorder_factory=lambda: episode_recorder(cfg, tokenizer),
        acquire_workers=cfg.rollout.acquire_workers,
        run_workers=cfg.rollout.run_workers,
        eval_workers=cfg.rollout.eval_workers,
        system_prompt=episode_system_prompt(cfg),
        gateway_options=cfg.rollout.gateway_options(),
        observation_rule=cfg.rollout.observation_rule,
        retries=cfg.rollout.retries,
        group_timeout_s=cfg.rollout.group_timeout_s,
    )


def score_reasoning(
    scorer: Any, trajectories: Sequence[Trajectory], instructions: Mapping[str, str], fmt: str
) -> float:
    """Put each scored trajectory's reasoning reward (``rewards/reasoning_reward.py``, over the
    reasoning of all its model turns) in ``reward_details["reasoning"]``; returns the mean."""
    totals = []
    for t in trajectories:
        if t.status != "ok":
            continue
        turns = [m["content"] for m in t.messages if m.get("role") == "assistant"]
        reasoning = "\n".join(filter(None, (reasoning_text(turn, fmt) for turn in turns)))  # type: ignore[arg-type]
        score = scorer.score(instructions[t.task_id], reasoning, turns=turns)
        t.reward_details["reasoning"] = score.total
        totals.append(score.total)
    return sum(totals) / len(totals) if totals else 0.0


def drop_unreplayable(groups: Sequence[Group], recorder_factory: Callable[[], ChatRecorder]) -> int:
    """Drop (``dropped = "replay_mismatch"``) each complete group with a trajectory whose logged
    observation-rule records do not rebuild its tokens exactly (``policies.replay``); returns how
    many trajectories failed. A rule that is not replayed faithfully trains on contexts the model
    never saw (paper 002, §5.3)."""
    failed = 0
    for group in groups:
        if group.dropped is not None:
            continue
        for t in group.trajectories:
            problem = check_replay(t, recorder_factory)
            if problem is not None:
                logger.warning("%s; group %s dropped", problem, group.group_id)
                failed += 1
                group.dropped = "replay_mismatch"
    return failed


def score_tools(trajectories: Sequence[Trajectory], references: Mapping[str, Sequence[Any]]) -> float:
    """Put each scored trajectory's tool reward (``rewards/tool_reward.py``, MCPDisCo eqs. 5-8
    against its task's ``reference_calls``; terminal shaping only on success) in
    ``reward_details["tool"]``; returns the mean."""
    totals = []
    for t in trajectories:
        if t.status != "ok":
            continue
        success = t.reward is not None and t.reward >= 1.0
        t.reward_details["tool"] = trajectory_tool_reward(t, references[t.task_id], success=success).total
        totals.append(t.reward_details["tool"])
    return sum(totals) / len(totals) if totals else 0.0


def step_samples(
    cfg: RunConfig,
    complete: Sequence[Sequence[Trajectory]],
    *,
    scorer: Any,
    instructions: Mapping[str, str],
    references: Mapping[str, Sequence[Any]],
) -> tuple[list[TrainSample], dict[str, float]]:
    """One step's learner samples from its complete groups, and the reward-family means logged:
    the reasoning family (``algorithm.reasoning_reward``), the tool family (``algorithm.tool_reward``),
    then GRPO-family or tool-adoption samples (``algorithm.returns``)."""
    families: dict[str, float] = {}
    flat = [t for g in complete for t in g]
    if scorer is not None:  # the reasoning family: scored in the driver, ~25 ms a trajectory
        families["reasoning_reward"] = score_reasoning(
            scorer, flat, instructions, cfg.rollout.reasoning_format
        )
    if cfg.algorithm.tool_reward:  # the tool family: MCPDisCo R_tool against reference calls
        families["tool_reward"] = score_tools(flat, references)
    algo = cfg.algorithm
    if algo.returns == "adoption":
        samples = adoption_samples(
            complete,
            max_steps=cfg.rollout.max_turns,
            lambda_len=algo.adoption_len,
            lambda_cap=algo.adoption_cap,
            lambda_mcp=algo.tool_bonus,
            eps=algo.eps,
        )
    else:
        samples = rl_samples(
            complete,
            std_normalize=algo.normalize_std,
            eps=algo.eps,
            keep_zero=algo.kl_coef > 0,
            band=algo.band,
            reasoning_key="reasoning" if scorer is not None else None,
            tool_key="tool" if algo.tool_reward else None,
        )
    return samples, families
