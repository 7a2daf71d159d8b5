"""From scored trajectories to learner samples.

``rl_samples`` turns complete groups into GRPO samples (group-normalised advantage per trajectory);
``demonstration_samples`` turns expert trajectories into supervised samples. Both keep the
trajectory's tokens, masks and rollout logprobs exactly as recorded.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

from policies.advantages import group_advantages, keep_groups
from policies.types import TrainSample, Trajectory


def rl_samples(
    groups: Iterable[Sequence[Trajectory]],
    *,
    std_normalize: bool = True,
    eps: float = 1e-6,
    keep_zero: bool = False,
    band: tuple[float, float] | None = None,
    reasoning_key: str | None = None,
) -> list[TrainSample]:
    """One sample per trajectory of each complete, scored group.

    Zero-advantage samples (every member of a group scored the same) carry no policy gradient;
    they are left out unless ``keep_zero`` (a KL term still learns from them). With ``band``
    (DAPO's dynamic sampling), groups whose success rate is not strictly inside it are left out.
    With ``reasoning_key``, each trajectory's ``reward_details[reasoning_key]`` (the reasoning
    reward family) is group-normalised the same way into the samples' ``reasoning_advantage``.
    """
    trajectories = [t for group in groups for t in group]
    for t in trajectories:
        if t.status != "ok" or t.reward is None:
            raise ValueError(
                f"rl_samples: trajectory of {t.task_id} is {t.status} with reward {t.reward}; "
                "only complete, scored groups may be trained"
            )
    if band is not None:
        kept = keep_groups(
            [float(t.reward) for t in trajectories],  # type: ignore[arg-type]
            [t.group_id for t in trajectories],
            band=band,
        )
        trajectories = [t for t in trajectories if kept[t.group_id]]
    advantages = group_advantages(
        [float(t.reward) for t in trajectories],  # type: ignore[arg-type]
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
