"""From scored trajectories to learner samples.

``rl_samples`` turns complete groups into GRPO samples (group-normalised advantage per trajectory),
``adoption_samples`` into tool-adoption step samples, ``demonstration_samples`` turns expert
trajectories into supervised samples. All keep the trajectory's tokens, masks, rollout logprobs and
images (a vision-language policy's, each where its tokens sit in the sample's row) exactly as
recorded, and read rewards from the trajectory's typed ``Score`` only
(``specs.trajectory``): a reward family the Evaluator did not compute is refused, never read as 0.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from policies.adoption_advantages import step_advantages_with_bonus
from policies.advantages import group_advantages, keep_groups, success_rate
from policies.types import TrainSample
from specs.trajectory import ImageSpan, Score, Trajectory


def rl_samples(
    groups: Iterable[Sequence[Trajectory]],
    *,
    std_normalize: bool = True,
    eps: float = 1e-6,
    keep_zero: bool = False,
    band: tuple[float, float] | None = None,
    reasoning: bool = False,
    action_signal: Literal["task", "tool"] = "task",
) -> list[TrainSample]:
    """One sample per trajectory of each complete, scored group.

    Zero-advantage samples (every member of a group scored the same) carry no policy gradient;
    they are left out unless ``keep_zero`` (a KL term still learns from them). With ``band``
    (DAPO's dynamic sampling), groups whose success rate is not strictly inside it are left out.
    With ``reasoning``, each trajectory's ``Score.reasoning`` (the reasoning reward family) is
    group-normalised the same way into the samples' ``reasoning_advantage``.

    ``action_signal`` picks what the action stream learns from. With r_i the signal of member i of a
    group of G (std the sample standard deviation, ``policies.advantages``)::

        A_i = (r_i - mean(r)) / (std(r) + eps)        (r_i - mean(r) without ``std_normalize``)
        r_i = Score.tool    with "tool"    (R_tool(τ_i), MCPDisCo Eq. 5-8)
        r_i = Score.task    with "task"    (the task outcome)

    into ``advantage``. Paper 000 (MCPDisCo) §3.3.2, Eq. 10: the action tokens (route and execute
    calls, their JSON arguments, the final answer) are weighted by A^T, estimated from the tool
    reward family R_tool, which covers termination through its terminal shaping r_term; the
    reasoning tokens by A^R from R_reasoning. ``Score.success`` decides which groups ``band``
    keeps; a zero-advantage sample is one whose A^T and A^R are both 0. A trajectory whose score
    lacks a family asked for (``None``: the Evaluator did not compute it) is refused (``ValueError``).
    """
    trajectories = [t for group in groups for t in group]
    scores = [_score(t, "rl_samples") for t in trajectories]
    for t, score in zip(trajectories, scores, strict=True):  # refused even in a group the band drops
        _family(t, score, action_signal)
        if reasoning:
            _family(t, score, "reasoning")
    if band is not None:
        kept = keep_groups(
            [1.0 if s.success else 0.0 for s in scores], [t.group_id for t in trajectories], band=band
        )
        pairs = [(t, s) for t, s in zip(trajectories, scores, strict=True) if kept[t.group_id]]
        trajectories, scores = [t for t, _ in pairs], [s for _, s in pairs]
    ids = [t.group_id for t in trajectories]
    advantages = group_advantages(
        [_family(t, s, action_signal) for t, s in zip(trajectories, scores, strict=True)],
        ids,
        std_normalize=std_normalize,
        eps=eps,
    )
    reasoning_advantages = [0.0] * len(trajectories)
    if reasoning:
        reasoning_advantages = group_advantages(
            [_family(t, s, "reasoning") for t, s in zip(trajectories, scores, strict=True)],
            ids,
            std_normalize=std_normalize,
            eps=eps,
        )
    return [
        sample
        for t, a, ar in zip(trajectories, advantages, reasoning_advantages, strict=True)
        if keep_zero or a != 0.0 or ar != 0.0
        for sample in _samples(t, a, ar)
    ]


def _score(t: Trajectory, caller: str) -> Score:
    """The trajectory's score; ``ValueError`` for a lost or unscored one (never trained)."""
    if t.status != "ok" or t.score is None:
        raise ValueError(
            f"{caller}: trajectory of {t.task_id} is {t.status} and {'un' if t.score is None else ''}scored; "
            "only complete, scored groups may be trained"
        )
    return t.score


def _family(t: Trajectory, score: Score, family: Literal["task", "tool", "reasoning"]) -> float:
    """One reward family of the score; ``ValueError`` naming the task and family when it is ``None``."""
    value = getattr(score, family)
    if value is None:
        raise ValueError(
            f"trajectory of {t.task_id} has no {family} reward (Score.{family} is None): the Evaluator "
            f"computes it only when its family is switched on (specs.scoring)"
        )
    return float(value)


def adoption_samples(
    groups: Iterable[Sequence[Trajectory]],
    *,
    eps: float = 1e-6,
    pack: bool = False,
    band: tuple[float, float] | None = None,
) -> list[TrainSample]:
    """Tool-adoption training (paper 002, §5.1): one sample per model turn (step).

    Per group, each trajectory's shaped return (``Score.adoption``, Eq. 3) is z-scored within the
    group and divided by its number of steps ``T``; each step's tool bonus is added *after* the
    normalisation (Eq. 4, ``policies.adoption_advantages``). Step ``t``'s sample is the conversation
    up to the end of turn ``t`` (within its rendering segment) with only turn ``t``'s tokens
    trainable. Steps with advantage 0 are left out. With ``band`` (paper 002, Table 6: the
    accuracy filter (0.05, 0.95)), groups whose success rate is not strictly inside it are left out:
    in an all-fail group the z-score would blow the length penalty's tie-breaker up to a full-size
    signal toward shorter episodes, i.e. toward answering without the tool.

    ``pack``: the steps of one rendering segment share one row instead, each turn's tokens carrying
    its own advantage (``TrainSample.token_advantages``) and its own sequence index
    (``TrainSample.sequences``: the seq-mean losses weigh each step as a row of its own). Under
    causal attention a token's logprob depends only on its prefix, which is the same in both
    forms, so the loss, gradient and update are the same for every aggregation, with one forward
    over each segment instead of one per step."""
    samples: list[TrainSample] = []
    for group in groups:
        group = list(group)
        adoption, successes = [], []
        for t in group:
            score = _score(t, "adoption_samples")
            if score.adoption is None:
                raise ValueError(
                    f"trajectory of {t.task_id} has no adoption score (Score.adoption is None): "
                    "the Evaluator computes it only with algorithm.returns: adoption"
                )
            adoption.append(score.adoption)
            successes.append(1.0 if score.success else 0.0)
        if band is not None and not band[0] < success_rate(successes) < band[1]:
            continue
        per_step = step_advantages_with_bonus(adoption, eps=eps)
        for t, advantages in zip(group, per_step, strict=True):
            samples.extend(_packed_step_samples(t, advantages) if pack else _step_samples(t, advantages))
    return samples


def demonstration_samples(trajectories: Iterable[Trajectory]) -> list[TrainSample]:
    """Supervised samples from the expert trajectories that succeeded (``Score.success``)."""
    return [sample for t in trajectories if t.status == "ok" and t.succeeded for sample in _samples(t, 0.0)]


def why_no_demonstration(trajectories: Sequence[Trajectory], asked: int) -> str:
    """Why ``demonstration_samples`` found nothing in the ``asked`` expert episodes: how many came
    back, what became of them, and the first failure's error (an environment or server that does
    not start fails every episode alike, and is then named)."""
    statuses = collections.Counter(t.status for t in trajectories)
    parts = [f"{len(trajectories)} of {asked} expert episodes came back"]
    if ran := statuses.pop("ok", 0):
        parts.append(f"{ran} ran to the end and none succeeded (see their evaluators' verdicts)")
    parts += [f"{n} {status}" for status, n in sorted(statuses.items())]
    first = next((t for t in trajectories if t.status != "ok"), None)
    if first is not None:
        parts.append(f"first: {first.task_id}: {first.error or 'no error recorded'}")
    return "; ".join(parts)


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
            **_images(t, start, end),
        )
        for start, end in itertools.pairwise(bounds)
        if any(t.trainable[start:end])
    ]


def turn_spans(t: Trajectory) -> list[tuple[int, int, int]]:
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
    for (segment, start, end), advantage in zip(turn_spans(t), advantages, strict=False):
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
                **_images(t, segment, end),
            )
        )
    return out


def _packed_step_samples(t: Trajectory, advantages: Sequence[float]) -> list[TrainSample]:
    """``_step_samples``' tokens and advantages, one row per rendering segment (see ``pack``)."""
    steps: dict[int, list[tuple[int, int, float]]] = {}
    for (segment, start, end), advantage in zip(turn_spans(t), advantages, strict=False):
        if advantage != 0.0:
            steps.setdefault(segment, []).append((start, end, advantage))
    out = []
    for segment, spans in steps.items():
        width = spans[-1][1] - segment
        trainable, logprobs, token_advantages = [0] * width, [0.0] * width, [0.0] * width
        sequences = [0] * width
        for step, (start, end, advantage) in enumerate(spans):
            for i in range(start, end):
                trainable[i - segment], logprobs[i - segment] = 1, t.logprobs[i]
                token_advantages[i - segment], sequences[i - segment] = advantage, step
        out.append(
            TrainSample(
                token_ids=t.token_ids[segment : segment + width],
                trainable=trainable,
                logprobs=logprobs,
                token_advantages=token_advantages,
                sequences=sequences,
                reasoning=[
                    r & m for r, m in zip(t.reasoning[segment : segment + width], trainable, strict=True)
                ]
                if t.reasoning
                else [],
                **_images(t, segment, segment + width),
            )
        )
    return out


def _images(t: Trajectory, start: int, end: int) -> dict[str, Any]:
    """The ``images`` and ``image_data`` of a sample that is ``t.token_ids[start:end]``."""
    spans = [s for s in t.image_spans if start <= s.start and s.start + s.length <= end]
    return {
        "images": [ImageSpan(sha256=s.sha256, start=s.start - start, length=s.length) for s in spans],
        "image_data": {s.sha256: t.images[s.sha256] for s in spans if s.sha256 in t.images},
    }
