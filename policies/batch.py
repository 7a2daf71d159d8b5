"""From scored trajectories to learner samples.

``rl_samples`` turns complete groups into GRPO samples (group-normalised advantage per trajectory);
``demonstration_samples`` turns expert trajectories into supervised samples. Both keep the
trajectory's tokens, masks and rollout logprobs exactly as recorded.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

from policies.advantages import group_advantages, keep_groups
from policies.types import TrainSample
from specs.trajectory import Trajectory
from rewards.adoption import shaped_return, step_advantages_with_bonus


def rl_samples(
    groups: Iterable[Sequence[Trajectory]],
    *,
    std_normalize: bool = True,
    eps: float = 1e-6,
    keep_zero: bool = False,
    band: tuple[float, float] | None = None,
    reasoning_key: str | None = None,
    tool_key: str | None = None,
) -> list[TrainSample]:
    """One sample per trajectory of each complete, scored group.

    Zero-advantage samples (every member of a group scored the same) carry no policy gradient;
    they are left out unless ``keep_zero`` (a KL term still learns from them). With ``band``
    (DAPO's dynamic sampling), groups whose success rate is not strictly inside it are left out.
    With ``reasoning_key``, each trajectory's ``reward_details[reasoning_key]`` (the reasoning
    reward family) is group-normalised the same way into the samples' ``reasoning_advantage``.

    ``tool_key`` picks what the action stream learns from. With r_i the signal of member i of a
    group of G (std the sample standard deviation, ``policies.advantages``)::

        A_i = (r_i - mean(r)) / (std(r) + eps)        (r_i - mean(r) without ``std_normalize``)
        r_i = reward_details[tool_key]   with tool_key    (R_tool(τ_i), MCPDisCo Eq. 5-8)
        r_i = reward                     without          (the task outcome)

    into ``advantage``. Paper 000 (MCPDisCo) §3.3.2, Eq. 10: the action tokens (route and execute
    calls, their JSON arguments, the final answer) are weighted by A^T, estimated from the tool
    reward family R_tool, which covers termination through its terminal shaping r_term; the
    reasoning tokens by A^R from R_reasoning (``reasoning_key``). The outcome reward still decides
    which groups ``band`` keeps (success rate: reward >= 1); a zero-advantage sample is one whose
    A^T and A^R are both 0. A trajectory without ``reward_details[tool_key]`` is refused
    (``ValueError``): a missing tool reward is not a zero one.
    """
    trajectories = [t for group in groups for t in group]
    for t in trajectories:
        if t.status != "ok" or t.reward is None:
            raise ValueError(
                f"rl_samples: trajectory of {t.task_id} is {t.status} with reward {t.reward}; "
                "only complete, scored groups may be trained"
            )
        if tool_key is not None:
            _detail(t, tool_key)  # refused even in a group the band drops: the driver forgot it
    if band is not None:
        kept = keep_groups(
            [float(t.reward) for t in trajectories],  # type: ignore[arg-type]
            [t.group_id for t in trajectories],
            band=band,
        )
        trajectories = [t for t in trajectories if kept[t.group_id]]
    action_signal = [
        float(t.reward) if tool_key is None else _detail(t, tool_key)  # type: ignore[arg-type]
        for t in trajectories
    ]
    advantages = group_advantages(
        action_signal,
        [t.group_id for t in trajectories],
        std_normalize=std_normalize,
        eps=eps,
    )
    reasoning = [0.0] * len(trajectories)
    if reasoning_key is not None:
        reasoning = group_advantages(
            [float(t.reward_details.get(reasoning_key, 0.0)) for t in trajectories],
            [t.group_id for t in trajectories],
            std_normalize=std_normalize,
            eps=eps,
        )
    return [
        sample
        for t, a, ar in zip(trajectories, advantages, reasoning, strict=True)
        if keep_zero or a != 0.0 or ar != 0.0
        for sample in _samples(t, a, ar)
    ]


def _detail(t: Trajectory, key: str) -> float:
    """``t.reward_details[key]`` as a number; ``ValueError`` naming the task and key when absent."""
    value = t.reward_details.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(
            f"rl_samples: trajectory of {t.task_id} has reward_details[{key!r}] = {value!r}; expected a "
            f"number (the tool reward, e.g. rewards.tool_reward.trajectory_tool_reward(...).total)"
        )
    return float(value)


def adoption_samples(
    groups: Iterable[Sequence[Trajectory]],
    *,
    max_steps: int,
    lambda_len: float,
    lambda_cap: float,
    lambda_mcp: float,
    eps: float = 1e-6,
) -> list[TrainSample]:
    """Tool-adoption training (paper 002, §5.1): one sample per model turn (step).

    Per group, each trajectory's shaped return ``R = ±1 - lambda_len T / T_max - lambda_cap
    [T >= T_max]`` (eq. 3; +1 when it succeeded, reward >= 1) is z-scored within the group and
    divided by its number of steps ``T``; a step whose tool call succeeded, is not read-only and
    calls a new (tool, arguments) key gets ``lambda_mcp`` more, *after* the normalisation (eq. 4,
    ``rewards/adoption.py``). Step ``t``'s sample is the conversation up to the end of turn ``t``
    (within its rendering segment) with only turn ``t``'s tokens trainable. Steps with advantage 0
    are left out."""
    samples: list[TrainSample] = []
    for group in groups:
        group = list(group)
        for t in group:
            if t.status != "ok" or t.reward is None:
                raise ValueError(
                    f"adoption_samples: trajectory of {t.task_id} is {t.status} with reward {t.reward}; "
                    "only complete, scored groups may be trained"
                )
        steps = [max(len(_turn_spans(t)), 1) for t in group]
        returns = [
            shaped_return(
                float(t.reward or 0.0) >= 1.0, n, max_steps, lambda_len=lambda_len, lambda_cap=lambda_cap
            )
            for t, n in zip(group, steps, strict=True)
        ]
        calls = [[c for c in t.tool_calls if c.turn <= n] for t, n in zip(group, steps, strict=True)]
        per_step = step_advantages_with_bonus(returns, steps, calls, lambda_mcp=lambda_mcp, eps=eps)
        for t, advantages in zip(group, per_step, strict=True):
            samples.extend(_step_samples(t, advantages))
    return samples


def demonstration_samples(
    trajectories: Iterable[Trajectory], *, min_reward: float = 1.0
) -> list[TrainSample]:
    """Supervised samples from expert trajectories that succeeded (reward >= ``min_reward``)."""
    return [
        sample
        for t in trajectories
        if t.status == "ok" and t.reward is not None and t.reward >= min_reward
        for sample in _samples(t, 0.0)
    ]


def _samples(t: Trajectory, advantage: float, reasoning_advantage: float = 0.0) -> list[TrainSample]:
    """One sample per rendering segment: a segment is a context the model really saw (a template
    that rewrote history started a new one), so it is scored alone, never after the old one."""
    bounds = [*t.segment_starts, len(t.token_ids)]
    return [
        TrainSample(
            token_ids=t.token_ids[start:end],
            trainable=t.trainable[start:end],
            logprobs=t.logprobs[start:end],
            advantage=advantage,
            reasoning=t.reasoning[start:end],
            reasoning_advantage=reasoning_advantage,
        )
        for start, end in itertools.pairwise(bounds)
        if any(t.trainable[start:end])
    ]


def _turn_spans(t: Trajectory) -> list[tuple[int, int, int]]:
    """Each model turn as ``(segment_start, start, end)``: maximal runs of trainable tokens."""
    starts = sorted(t.segment_starts)
    spans, i, n = [], 0, len(t.token_ids)
    while i < n:
        if not t.trainable[i]:
            i += 1
            continue
        j = i
        while j < n and t.trainable[j] and (j == i or j not in starts):
            j += 1
        spans.append((max(s for s in starts if s <= i), i, j))
        i = j
    return spans


def _step_samples(t: Trajectory, advantages: Sequence[float]) -> list[TrainSample]:
    out = []
    for (segment, start, end), advantage in zip(_turn_spans(t), advantages, strict=False):
        if advantage == 0.0:
            continue
        trainable = [0] * (start - segment) + [1] * (end - start)
        out.append(
            TrainSample(
                token_ids=t.token_ids[segment:end],
                trainable=trainable,
                logprobs=[0.0] * (start - segment) + t.logprobs[start:end],
                advantage=advantage,
                reasoning=[r & m for r, m in zip(t.reasoning[segment:end], trainable, strict=True)]
                if t.reasoning
                else [],
            )
        )
    return out
