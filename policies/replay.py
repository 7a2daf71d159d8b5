"""Rebuild a recorded trajectory's token stream from its messages and observation-rule records.

Paper 002 (§5.3, App. F) finds that dropping observations costs accuracy unless rollout, evaluation
and training share one rule exactly, "logged and replayed". The agent loop logs what the rule did at
every step (``Trajectory.observation_records``, ``policies.observations.RuleRecord``) next to the
full history (``Trajectory.messages``). ``rebuild`` drives a fresh ``ChatRecorder`` through the same
episode from that log alone: the opening messages, then for each model turn the sampled tokens as
recorded, then the context the rule produced (``observations.replay``) or, without a rule, the
messages that followed the turn. ``check_replay`` compares the result with the recording token for
token (ids, trainable mask, reasoning mask, segment starts, where each image's tokens are); the training driver runs it on every
trajectory trained under a rule and drops (and counts) a group whose log does not reproduce its
tokens, so the learner only ever trains on contexts that the logged rule provably produced.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import msgspec

from policies.observations import RuleRecord, replay
from policies.tokens import ChatRecorder
from policies.types import Generation
from specs.trajectory import Trajectory


class ReplayError(ValueError):
    """A trajectory's messages and records do not rebuild its recorded tokens."""


def turn_tokens(t: Trajectory) -> list[tuple[int, int]]:
    """Each model turn's ``[start, end)`` in ``t.token_ids``: maximal runs of trainable tokens,
    split where a rendering segment starts (consecutive turns always have untrainable glue between
    them, so a run never spans two turns)."""
    starts = set(t.segment_starts)
    spans: list[tuple[int, int]] = []
    for trainable, run in itertools.groupby(range(len(t.token_ids)), key=lambda i: t.trainable[i]):
        if not trainable:
            continue
        indices = list(run)
        begin = indices[0]
        for i in indices[1:]:
            if i in starts:
                spans.append((begin, i))
                begin = i
        spans.append((begin, indices[-1] + 1))
    return spans


def rebuild(t: Trajectory, recorder: ChatRecorder) -> ChatRecorder:
    """Drive ``recorder`` (fresh, same tokenizer and options as the rollout's) through ``t``'s
    episode from its messages, records and sampled tokens; returns it. ``ReplayError`` when the
    log does not fit (more model turns than assistant messages, records out of order)."""
    where = f"replay of {t.task_id} ({t.group_id})"
    records = msgspec.convert(t.observation_records, list[RuleRecord])
    try:
        contexts = {r.step: c for r, c in zip(records, replay(t.messages, records), strict=True)}
    except ValueError as e:
        raise ReplayError(f"{where}: {e}") from e
    assistants = [i for i, m in enumerate(t.messages) if m.get("role") == "assistant"]
    turns = turn_tokens(t)
    if len(turns) != len(assistants) or len(turns) != len(t.versions):
        raise ReplayError(
            f"{where}: {len(turns)} model turns in the tokens, {len(assistants)} assistant messages and "
            f"{len(t.versions)} versions; expected one of each per turn"
        )
    if not assistants:
        raise ReplayError(f"{where}: no model turn to replay")
    recorder.images.update(t.images)  # a vision-language policy's pixels, for the image parts
    recorder.start(t.messages[: assistants[0]])
    for k, (start, end) in enumerate(turns):
        step = k + 1
        recorder.add_model_turn(
            Generation(
                token_ids=t.token_ids[start:end],
                logprobs=t.logprobs[start:end],
                version=t.versions[k],
                finish_reason="stop",
            )
        )
        if step in contexts:
            recorder.set_context(contexts[step])
            continue
        following = t.messages[assistants[k] + 1 : assistants[k + 1] if step < len(assistants) else None]
        if following:
            recorder.add_messages(following)
    return recorder


def check_replay(t: Trajectory, recorder_factory: Callable[[], ChatRecorder]) -> str | None:
    """``None`` when ``t``'s log rebuilds its recording token for token, else what differs."""
    try:
        fields = rebuild(t, recorder_factory()).trajectory_fields()
    except (ReplayError, ValueError, RuntimeError) as e:
        return str(e)
    recorded: dict[str, Any] = {
        "token_ids": t.token_ids,
        "trainable": t.trainable,
        "segment_starts": t.segment_starts,
        "reasoning": t.reasoning,
        "image_spans": t.image_spans,
    }
    for name, value in recorded.items():
        if fields[name] != value:
            first = next(
                (i for i, (a, b) in enumerate(zip(fields[name], value, strict=False)) if a != b),
                min(len(fields[name]), len(value)),
            )
            return (
                f"replay of {t.task_id}: {name} differs from the recording at position {first} "
                f"(rebuilt {len(fields[name])}, recorded {len(value)})"
            )
    return None
