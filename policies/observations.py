"""Observation rules: which past tool observations the model sees in full (paper 002, Eqs. 1-2).

Paper 002 (§3, "Context construction") builds the context at step ``t`` as

    C_t = σ(T_t) ⊕ ⨁_{i=τ_t}^{t-1} (u_i ⊕ a_i) ⊕ u_t ⊕ I ⊕ H_t,   τ_t = max(1, t - k + 1),   (Eq. 1)
    u_i = ρ(r_i) ⊕ õ_i,

with ``σ(T_t)`` the system prompt, ``a_i`` the assistant output holding call ``c_i``, ``r_i`` the
text result of ``c_{i-1}``, ``o_i`` the screenshot taken after it, ``õ_i`` what is kept of it, and
``k`` the image-history depth (text persists in full, pixels are windowed). The retention rule is

    õ_i = π     if drop is on and succ_mcp(c_{i-1}),                                        (Eq. 2)
    õ_i = o_i   otherwise,

``π`` a short text placeholder, ``succ_mcp`` *execution-level* success (parsed, dispatched,
returned without error). The paper's "ctx_opt" is ``k = 2`` with drop on; §5.3 shows its accuracy
cost disappears only when rollout, evaluation and training share the rule exactly, "logged and
replayed" (App. F: "each image decision logged and replayed in training").

How this maps onto our chat messages (``policies.chat``):

- An *observation* is a ``tool`` message, or a ``user`` message wrapped in ``<tool_response>`` tags
  (``format_tool_result(role="user")``). No other message is ever touched.
- Its *body* is the text inside the tags; its *images* are image content parts (a list content)
  and ``[image n: <mime>, attached]`` markers (``actors.mcp_results.content_text``'s ``keep_images``).
- *Costly* (the generalised ``o_i``): body longer than ``costly_chars`` characters (default 1500,
  the paper's result cap ``L``), or any image. A body opening with ``π`` is a placeholder: never
  costly, never replaced again, so applying the rule to its own output changes nothing.
- Window (``keep_last_costly = k``): every costly observation but the last ``k`` has its body
  replaced by ``π (what was dropped)``, tags kept. The newest observation counts among the ``k``,
  as ``u_t`` does in Eq. 1. Cheap observations are never windowed: like ``H_t`` they persist.
- Success rule (``placeholder_after_success``): the observation "following" ``c_{i-1}`` is ``u_i``,
  the tool message carrying that call's result; it counts as successful unless its body opens with
  ``format_tool_result``'s ``error (<kind>): ``. Eq. 2 replaces ``õ_i`` and keeps ``ρ(r_i)``: the
  frame goes *because* its result is already in text (§4.1; App. C's worked example keeps "Tool
  result: ..." and drops the screenshot). So each *image* of a successful observation becomes
  ``π (image n: <mime>; the call succeeded)`` and its text stays; a text-only success is left as
  is (dropping it would remove ``r_i`` itself); an error is never touched (its frame is the only
  evidence of what went wrong).
- Both rules read the observations as given: a success-dropped frame still holds a window slot (the
  paper windows steps; App. B applies the drop "within the window"), and a windowed observation
  gets the window placeholder whatever the success rule says.

Token cost, and ``ChatRecorder`` segments (``policies.tokens``): the success rule is decided when
an observation arrives, from that observation alone, and never revised, so it is append-only: the
recorder appends the placeholder as an ordinary untrainable delta. The window is not: when a costly
observation arrives while ``k`` are visible, the oldest one becomes a placeholder, the rendering is
no longer an extension of the recorded text, and ``ChatRecorder.add_messages`` starts a new
*segment* (the whole reduced context re-encoded, untrainable; ``segment_starts`` grows; the next
prompt is that segment only; the learner scores each segment as its own sequence).
``rewritten_steps`` lists those steps; with ``C`` costly observations, each followed by a model
turn, an episode has ``1 + max(0, C - k)`` segments. Generation pays ``|C_t|`` (at most ``k``
costly observations) per step; the learner pays each segment once, i.e. the reduced context once
per window slide rather than once per step as with the paper's per-step samples (§5.1, "prompt
``C_t`` and response ``a_t``"), its limit of one segment per step. Sampled tokens stay in exactly
one segment, trainable, conditioned on the same context as in rollout.

Where it runs: ``policies.react.run_episode`` keeps the full history, gives the model
``apply_rule(history)`` through ``ChatRecorder.set_context`` at every step, and stores the full
history (``Trajectory.messages``) with the records (``Trajectory.observation_records``);
``policies.replay`` rebuilds the tokens from them, which the training driver and ``launch/eval.py``
check for every episode (config ``rollout.observation_rule``, eval ``--observation-rule``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any, Literal

import msgspec

from policies.chat import ATTACHED, TOOL_RESPONSE_CLOSE, TOOL_RESPONSE_OPEN
from specs.observation_rule import ObservationRule

IMAGE_PART_TYPES = frozenset({"image", "image_url", "input_image"})
_ERROR = re.compile(r"error \([^)]*\): ")

Content = str | list[dict[str, Any]]


class Replacement(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One observation shown differently from the full history."""

    index: int
    """Position of the message in the message list."""
    reason: Literal["window", "success"]
    content: Content
    """The content the model saw instead."""
    digest: str
    """sha256 prefix of the original content: ``replay`` refuses a history it was not made from."""


class RuleRecord(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What the rule did at one step; logged with the trajectory, replayed by the learner and eval."""

    step: int
    n_messages: int
    """Length of the full message list the step's context was built from."""
    replaced: tuple[Replacement, ...] = ()


def apply_rule(
    messages: list[dict[str, Any]], rule: ObservationRule, *, step: int
) -> tuple[list[dict[str, Any]], RuleRecord]:
    """The context the model sees at ``step`` (a new list; ``messages`` is not modified) and its record."""
    views = {i: _view(m, i, "apply_rule") for i, m in enumerate(messages) if _is_observation(m)}
    costly = [i for i, v in views.items() if not v.placeholder(rule) and v.costly(rule)]
    k = rule.keep_last_costly
    windowed = set(costly[:-k]) if k is not None and len(costly) > k else set()
    replaced: list[Replacement] = []
    for i, view in views.items():
        if i in windowed:
            reason: Literal["window", "success"] = "window"
            content = view.window_placeholder(rule)
        elif rule.placeholder_after_success and view.images and not view.error and not view.placeholder(rule):
            reason = "success"
            content = _drop_images(view.content, rule.placeholder_text)
        else:
            continue
        replaced.append(Replacement(index=i, reason=reason, content=content, digest=_digest(view.content)))
    record = RuleRecord(step=step, n_messages=len(messages), replaced=tuple(replaced))
    return _substitute(messages, record), record


def replay(messages: list[dict[str, Any]], records: Sequence[RuleRecord]) -> list[list[dict[str, Any]]]:
    """Every step's context, rebuilt from the full message list and the logged records, in order.

    ``replay(full, records)[j] == apply_rule(full[:records[j].n_messages], rule, step=records[j].step)[0]``
    for the rule that made the records; raises ``ValueError`` if the records do not fit ``messages``.
    """
    contexts: list[list[dict[str, Any]]] = []
    previous: RuleRecord | None = None
    for record in records:
        where = f"replay: record of step {record.step}"
        if previous is not None and (record.step <= previous.step or record.n_messages < previous.n_messages):
            raise ValueError(
                f"{where} follows step {previous.step} ({previous.n_messages} messages); expected "
                "increasing steps over a growing history"
            )
        if record.n_messages > len(messages):
            raise ValueError(f"{where} needs {record.n_messages} messages, got {len(messages)}")
        for rep in record.replaced:
            if not 0 <= rep.index < record.n_messages or not _is_observation(messages[rep.index]):
                raise ValueError(f"{where}: messages[{rep.index}] is not a tool observation")
            if _digest(messages[rep.index].get("content")) != rep.digest:
                raise ValueError(
                    f"{where}: messages[{rep.index}] differs from the one the rule saw; expected the "
                    "full (unreduced) history of the same episode"
                )
        contexts.append(_substitute(messages[: record.n_messages], record))
        previous = record
    return contexts


def rewritten_steps(records: Sequence[RuleRecord]) -> list[int]:
    """Steps whose context is not an extension of the previous step's: ``ChatRecorder`` starts a
    new segment there (every earlier message must render as it did one step before)."""
    steps = []
    for prev, cur in zip(records, records[1:], strict=False):
        before = {r.index: r.content for r in prev.replaced}
        now = {r.index: r.content for r in cur.replaced if r.index < prev.n_messages}
        if now != before:
            steps.append(cur.step)
    return steps


# -- helpers -----------------------------------------------------------------------------------


class _View(msgspec.Struct, frozen=True):
    content: Content
    body: str
    images: int
    error: bool

    def placeholder(self, rule: ObservationRule) -> bool:
        return self.body.startswith(rule.placeholder_text)

    def costly(self, rule: ObservationRule) -> bool:
        return self.images > 0 or len(self.body) > rule.costly_chars

    def window_placeholder(self, rule: ObservationRule) -> Content:
        what = [f"{len(self.body)} chars"]
        if self.images:
            what.append(f"{self.images} image{'s' if self.images > 1 else ''}")
        if self.error:
            what.append("an error")
        k = rule.keep_last_costly
        text = _wrap(f"{rule.placeholder_text} ({', '.join(what)}; beyond the last {k} costly)")
        return text if isinstance(self.content, str) else [{"type": "text", "text": text}]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")


def _is_observation(message: dict[str, Any]) -> bool:
    role = message.get("role")
    if role == "tool":
        return True
    content = message.get("content")
    if role != "user" or not isinstance(content, str | list):
        return False
    text = _text(content)
    return text.startswith(TOOL_RESPONSE_OPEN) and text.rstrip().endswith(TOOL_RESPONSE_CLOSE)


def _view(message: dict[str, Any], index: int, caller: str) -> _View:
    content = message.get("content")
    if not isinstance(content, str) and not (
        isinstance(content, list) and all(isinstance(p, dict) for p in content)
    ):
        raise ValueError(
            f"{caller}: messages[{index}] is a tool observation with content of type "
            f"{type(content).__name__}; expected str or a list of content-part dicts"
        )
    body = _text(content).strip()
    if body.startswith(TOOL_RESPONSE_OPEN) and body.endswith(TOOL_RESPONSE_CLOSE):
        body = body[len(TOOL_RESPONSE_OPEN) : -len(TOOL_RESPONSE_CLOSE)].strip("\n")
    parts = 0 if isinstance(content, str) else sum(p.get("type") in IMAGE_PART_TYPES for p in content)
    images = parts + len(ATTACHED.findall(body))
    return _View(content=content, body=body, images=images, error=_ERROR.match(body) is not None)


def _drop_images(content: Content, placeholder: str) -> Content:
    def note(m: re.Match[str]) -> str:
        return f"{placeholder} (image {m[1]}: {m[2]}; the call succeeded)"

    if isinstance(content, str):
        return ATTACHED.sub(note, content)
    out: list[dict[str, Any]] = []
    n = 0
    for part in content:
        if part.get("type") in IMAGE_PART_TYPES:
            n += 1
            out.append({"type": "text", "text": f"{placeholder} (image part {n}; the call succeeded)"})
        elif part.get("type") == "text":
            out.append({**part, "text": ATTACHED.sub(note, part.get("text", ""))})
        else:
            out.append(dict(part))
    return out


def _wrap(text: str) -> str:
    return f"{TOOL_RESPONSE_OPEN}\n{text}\n{TOOL_RESPONSE_CLOSE}"


def _digest(content: Any) -> str:
    blob = json.dumps(content, sort_keys=True, ensure_ascii=False).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def _substitute(messages: list[dict[str, Any]], record: RuleRecord) -> list[dict[str, Any]]:
    out = [dict(m) for m in messages]
    for rep in record.replaced:
        # A fresh copy: the caller may edit its context without editing the record.
        out[rep.index]["content"] = json.loads(json.dumps(rep.content))
    return out
