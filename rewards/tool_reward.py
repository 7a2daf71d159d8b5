"""MCPDisCo tool reward R_tool: format and correctness of each external action, penalties, terminal shaping.

Paper 000 (MCPDisCo), §3.2 "L2: Tool syntax and correctness reward", Eq. 5-8, and Appendix A
"Reward hyperparameters" (R_format = 1, s_base = s_req = s_srv = s_tool = 1, severe format error
-2.0, missing required keys -3.0). The reasoning family (Eq. 1-4) is not here.

Per action a (one ``ToolCallRecord``), §3.2: ``R_tool(a) = R_format(a) + R_correct(a) + P(a)``.

Execute: a call of ``<server>__<tool>`` with arguments Â, matched to a reference call g = (s, t, A, Q)
(server, tool, reference arguments, required keys; ``specs.task.ReferenceCall``)::

    H_exec = R_format + s_base·1[Â is an object] + s_req·1[Q ⊆ keys(Â)] + s_srv·1[ŝ = s] + s_tool·1[t̂ = t]
             + IoU_keys + N_val_match                                                        (Eq. 5)
    IoU_keys    = |keys(Â) ∩ keys(A)| / |keys(Â) ∪ keys(A)|     (1 when both are empty)
    N_val_match = #{k ∈ keys(A) ∩ keys(Â) : Â[k] = A[k]}        (exact JSON equality)
    R_correct   = 6·H_exec / (2 + |A|) - 3                                                  (Eq. 6)
    P           = p_req (-3) if Q ⊄ keys(Â), else 0

Route: a call of the built-in ``route`` tool (``actors.tool_router``) with query text and the tools
it returned (``route_hits``)::

    H_route   = R_format + s_base + s_query·1[query is non-empty text]
                + s_srv_match·1[a hit is on a reference server] + s_tool_match·1[a hit is a reference tool]  (Eq. 7)
    R_correct = 6·H_route / 3 - 2                                                            (Eq. 8)

Severe format error (``error_kind`` in ``SEVERE_FORMAT_ERRORS``: the turn's ``<tool_call>`` could not
be parsed, see ``policies.tool_calls``): nothing to evaluate, so R_format = R_correct = 0 and
P = p_format (-2). Any other parsed call has R_format = r_format (1).

Trajectory (K actions, U reference calls no execute call was matched to, D = K + U)::

    R_tool(τ) = (1/D) Σ_a R_tool(a) + r_term·1[well-formed final answer]      (first term 0 when D = 0)

Choices where the paper is silent or ambiguous (each is a documented default, not the paper's word):

- Matching. Execute calls are matched one-to-one to reference calls, as many pairs as possible
  (min(#execute, #references)), maximising the summed per-call reward of the pairs (Hungarian
  algorithm). Not order-aligned: a retried or exploratory call would shift every later pair.
  The reward depends only on the optimal total, never on how ties are broken.
- Unmatched execute calls (more calls than references, or a task without reference calls) get the
  format term only: there is no reference to be correct against, and a repeated correct call must
  not be paid twice. Route calls of a task without reference calls likewise get the format term only.
- Aggregation. The paper scores actions; GRPO (App. A) needs one scalar per trajectory. Averaging
  over D = K + U keeps the scale independent of chain length and makes a reference call nobody
  attempted count 0, so covering more of the reference calls pays.
- Penalties are added (P above), not substituted: s_req in Eq. 5 would otherwise never vary.
- Eq. 6 as printed does not bound H_exec / (2 + |A|) by 1: a parsed call has H_exec in [2, 6 + |A|],
  so R_correct lies in [12/(2+|A|) - 3, 6(6+|A|)/(2+|A|) - 3], e.g. [0, 9] for |A| = 2, and an exact
  call earns less the more arguments its reference has (|A| = 5: R_tool = 1 + 66/7 - 3 ≈ 7.4), below
  a route call that recalls the reference (R_tool = 9, Eq. 8), so extra route calls can raise the
  mean. ``ToolRewardWeights.exec_norm_offset`` holds the 2; 6 gives the reading in which R_correct
  lies in [-3, 3] (and an exact call always earns 1 + 3 = 4).
- Terminal shaping: the paper gives "a modest terminal shaping reward" for "a well-formed final answer
  that successfully concludes the task" and no value; r_term defaults to 1 (the unit of the s_*
  bonuses). Well-formed: a non-blank final answer (the episode ended by Terminate, not by a limit);
  when the caller passes ``success`` (the task's evaluators), it must also be true.
- Route recall reads the tools a route call returned from its record (``ToolCallRecord.route_hits``,
  filled by the gateway's router, best first). A route call that failed or returned no hit recalls
  nothing; so does one whose record has no hits (``None``). Recall scores the route *action* (did
  its query retrieve the reference tools), so it counts whether or not the model went on to read
  the answer (a route call on the last turn, or an answer an observation rule later replaced).

From a recorded trajectory: ``trajectory_tool_reward(trajectory, task.reference_calls, success=...)``
takes its call log and final answer; it is called by the Evaluator (``actors/evaluator.py``), the one
place an episode is scored.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import msgspec
import numpy as np
from scipy.optimize import linear_sum_assignment

from specs.task import ReferenceCall
from specs.trajectory import ToolCallRecord, Trajectory

ROUTE_TOOL_NAME = "route"
"""Name of the built-in routing tool (``actors.tool_router.ROUTE_TOOL``)."""
SEVERE_FORMAT_ERRORS: frozenset[str] = frozenset({"parse_error"})
"""``error_kind`` values that are severe format errors: the call itself could not be read."""
EXEC_SCALE, EXEC_SHIFT = 6.0, -3.0
"""Eq. 6: R_correct = 6·H_exec/(2 + |A|) - 3."""
ROUTE_SCALE, ROUTE_NORM, ROUTE_SHIFT = 6.0, 3.0, -2.0
"""Eq. 8: R_correct = 6·H_route/3 - 2."""


class ToolRewardWeights(msgspec.Struct, frozen=True, kw_only=True):
    """Coefficients of Eq. 5-8 and the penalties; defaults from Appendix A."""

    format: float = 1.0
    """R_format: the format base of a parsed call."""
    base: float = 1.0
    """s_base: the arguments are an object."""
    required: float = 1.0
    """s_req: every required key is present."""
    server: float = 1.0
    """s_srv: the reference server."""
    tool: float = 1.0
    """s_tool: the reference tool."""
    query: float = 1.0
    """s_query: a route call's query is non-empty text."""
    server_match: float = 1.0
    """s_srv_match: a route hit is on a reference server."""
    tool_match: float = 1.0
    """s_tool_match: a route hit is a reference tool."""
    format_penalty: float = -2.0
    """P for a severe format error."""
    missing_required_penalty: float = -3.0
    """P for a call missing a required key of its reference."""
    terminal: float = 1.0
    """r_term for a well-formed final answer; the paper says only "modest"."""
    exec_norm_offset: float = 2.0
    """The 2 in Eq. 6's denominator 2 + |A|; must be positive."""

    def __post_init__(self) -> None:
        for field in msgspec.structs.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"ToolRewardWeights.{field.name}: expected a finite number, got {value!r}")
        if self.exec_norm_offset <= 0:
            raise ValueError(
                f"ToolRewardWeights.exec_norm_offset: expected > 0 (Eq. 6 divides by it when the "
                f"reference has no arguments), got {self.exec_norm_offset!r}"
            )


DEFAULT_WEIGHTS = ToolRewardWeights()


class CallScore(msgspec.Struct, frozen=True, kw_only=True):
    """R_tool(a) of one action, with its parts."""

    index: int
    """Position of the call in the trajectory's tool-call log."""
    turn: int
    kind: Literal["execute", "route", "format_error"]
    reference: int | None = None
    """Index of the reference call an execute call was matched to; ``None``: unmatched."""
    format: float
    correct: float
    penalty: float
    total: float
    terms: dict[str, float] = msgspec.field(default_factory=dict)
    """The terms of H (Eq. 5 or 7) and H itself; empty when correctness was not evaluated."""


class ToolReward(msgspec.Struct, frozen=True, kw_only=True):
    """R_tool of a trajectory: ``total = format + correct + penalty + terminal`` (each a mean over D)."""

    total: float
    format: float
    correct: float
    penalty: float
    terminal: float
    slots: int
    """D = K + U: actions plus reference calls left unmatched."""
    calls: tuple[CallScore, ...]
    unmatched_references: tuple[int, ...]


def split_name(name: str) -> tuple[str, str]:
    """``"<server>__<tool>"`` -> ``(server, tool)``; a name without ``__`` has no server."""
    server, sep, tool = name.partition("__")
    return (server, tool) if sep else ("", name)


def same_value(a: Any, b: Any) -> bool:
    """Exact JSON equality: ``1 == 1.0`` but ``True != 1`` and ``"1" != 1``; lists and objects deep."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


def key_iou(predicted: Sequence[str], reference: Sequence[str]) -> float:
    """|P ∩ R| / |P ∪ R| of two key sets; 1.0 when both are empty (nothing to disagree on)."""
    p, r = set(predicted), set(reference)
    return 1.0 if not p | r else len(p & r) / len(p | r)


def execute_score(
    call: ToolCallRecord, ref: ReferenceCall, w: ToolRewardWeights, *, index: int = 0, ref_index: int = 0
) -> CallScore:
    """R_tool(a) of a parsed execute call (log position ``index``) against reference call
    ``ref_index`` (Eq. 5, Eq. 6, penalty)."""
    server, tool = split_name(call.name)
    args = call.arguments if isinstance(call.arguments, dict) else {}
    has_required = all(k in args for k in ref.required_keys)
    terms = {
        "R_format": w.format,
        "s_base": w.base if isinstance(call.arguments, dict) else 0.0,
        "s_req": w.required if has_required else 0.0,
        "s_srv": w.server if server == ref.server else 0.0,
        "s_tool": w.tool if tool == ref.tool else 0.0,
        "IoU_keys": key_iou(list(args), list(ref.arguments)),
        "N_val_match": float(sum(k in args and same_value(args[k], v) for k, v in ref.arguments.items())),
    }
    h = sum(terms.values())
    correct = EXEC_SCALE * h / (w.exec_norm_offset + len(ref.arguments)) + EXEC_SHIFT  # Eq. 6
    penalty = 0.0 if has_required else w.missing_required_penalty
    return CallScore(
        index=index,
        turn=call.turn,
        kind="execute",
        reference=ref_index,
        format=w.format,
        correct=correct,
        penalty=penalty,
        total=w.format + correct + penalty,
        terms={**terms, "H": h},
    )


def route_score(
    call: ToolCallRecord,
    reference: Sequence[ReferenceCall],
    hits: Sequence[str],
    w: ToolRewardWeights,
    *,
    index: int = 0,
) -> CallScore:
    """R_tool(a) of a route call (Eq. 7, Eq. 8): a valid query, and hits (namespaced tool names it
    returned) recalling a reference server and tool."""
    if isinstance(hits, str):
        raise ValueError(f"route hits of turn {call.turn}: expected a list of tool names, got a string")
    query = call.arguments.get("query") if isinstance(call.arguments, dict) else None
    hit_names = set(hits)
    hit_servers = {split_name(h)[0] for h in hits}
    terms = {
        "R_format": w.format,
        "s_base": w.base if isinstance(call.arguments, dict) else 0.0,
        "s_query": w.query if isinstance(query, str) and query.strip() else 0.0,
        "s_srv_match": w.server_match if any(r.server in hit_servers for r in reference) else 0.0,
        "s_tool_match": w.tool_match if any(r.name in hit_names for r in reference) else 0.0,
    }
    h = sum(terms.values())
    correct = ROUTE_SCALE * h / ROUTE_NORM + ROUTE_SHIFT  # Eq. 8
    return CallScore(
        index=index,
        turn=call.turn,
        kind="route",
        format=w.format,
        correct=correct,
        penalty=0.0,
        total=w.format + correct,
        terms={**terms, "H": h},
    )


def best_assignment(scores: Sequence[Sequence[float]]) -> list[tuple[int, int]]:
    """``(row, column)`` pairs, min(rows, columns) of them, one per row and column, maximising the
    summed score (``scipy.optimize.linear_sum_assignment``); sorted by row."""
    if not scores or not scores[0]:
        return []
    if any(len(r) != len(scores[0]) for r in scores):
        raise ValueError(f"scores: expected a rectangular matrix, got row lengths {[len(r) for r in scores]}")
    rows, cols = linear_sum_assignment(np.asarray(scores, dtype=float), maximize=True)
    return sorted((int(i), int(j)) for i, j in zip(rows, cols, strict=True))


def is_well_formed(final_answer: str | None) -> bool:
    """A final answer that ends the episode: non-blank text (``None``: cut by a limit, no answer)."""
    return isinstance(final_answer, str) and bool(final_answer.strip())


def tool_reward(
    calls: Sequence[ToolCallRecord],
    reference: Sequence[ReferenceCall],
    *,
    final_answer: str | None,
    success: bool | None = None,
    weights: ToolRewardWeights = DEFAULT_WEIGHTS,
    route_tool: str = ROUTE_TOOL_NAME,
) -> ToolReward:
    """R_tool(τ) of one trajectory (module docstring): per-action Eq. 5-8 with penalties, averaged
    over D = actions + unmatched references, plus terminal shaping.

    ``reference``: the task's ``reference_calls`` (empty: format term only). ``success``: the task's
    verdict when known (``False`` withholds the terminal reward). A route call's hits are its record's
    ``route_hits`` (none when it failed).
    """
    w = weights
    scored: dict[int, CallScore] = {}
    executes: list[int] = []
    for i, call in enumerate(calls):
        if call.error_kind in SEVERE_FORMAT_ERRORS:
            p = w.format_penalty
            scored[i] = CallScore(
                index=i, turn=call.turn, kind="format_error", format=0.0, correct=0.0, penalty=p, total=p
            )
        elif call.name == route_tool and reference:
            scored[i] = route_score(call, reference, (call.route_hits or ()) if call.ok else (), w, index=i)
        elif call.name == route_tool:
            scored[i] = _format_only(i, call, "route", w)
        else:
            executes.append(i)
    pairs = [
        [execute_score(calls[i], ref, w, index=i, ref_index=j) for j, ref in enumerate(reference)]
        for i in executes
    ]
    matched = {executes[r]: c for r, c in best_assignment([[s.total for s in row] for row in pairs])}
    for r, i in enumerate(executes):
        if i in matched:
            scored[i] = pairs[r][matched[i]]
        else:
            scored[i] = _format_only(i, calls[i], "execute", w)
    ordered = tuple(scored[i] for i in range(len(calls)))
    unmatched = tuple(sorted(set(range(len(reference))) - set(matched.values())))
    slots = len(ordered) + len(unmatched)

    def mean(values: list[float]) -> float:
        return sum(values) / slots if slots else 0.0

    fmt = mean([s.format for s in ordered])
    correct = mean([s.correct for s in ordered])
    penalty = mean([s.penalty for s in ordered])
    terminal = w.terminal if is_well_formed(final_answer) and success is not False else 0.0
    return ToolReward(
        total=mean([s.total for s in ordered]) + terminal,
        format=fmt,
        correct=correct,
        penalty=penalty,
        terminal=terminal,
        slots=slots,
        calls=ordered,
        unmatched_references=unmatched,
    )


def _format_only(
    index: int, call: ToolCallRecord, kind: Literal["execute", "route"], w: ToolRewardWeights
) -> CallScore:
    """A parsed call with no reference to be correct against: R_format only."""
    return CallScore(
        index=index, turn=call.turn, kind=kind, format=w.format, correct=0.0, penalty=0.0, total=w.format
    )


def trajectory_tool_reward(
    trajectory: Trajectory,
    reference: Sequence[ReferenceCall],
    *,
    success: bool | None,
    weights: ToolRewardWeights = DEFAULT_WEIGHTS,
) -> ToolReward:
    """R_tool(τ) of a recorded episode: ``tool_reward`` on its call log and final answer.

    ``reference``: the task's ``reference_calls``. ``success``: the task's verdict (every evaluator
    passed), withholding r_term when ``False``; ``None`` when not evaluated. Raises
    ``ValueError`` for a trajectory whose status is not ``ok``: a failed episode has no reward to give.
    """
    if trajectory.status != "ok":
        raise ValueError(
            f"trajectory_tool_reward: trajectory of task {trajectory.task_id} is {trajectory.status} "
            f"({trajectory.error}); expected status 'ok': only a complete episode is scored"
        )
    return tool_reward(
        trajectory.tool_calls,
        reference,
        final_answer=trajectory.final_answer,
        success=success,
        weights=weights,
    )
