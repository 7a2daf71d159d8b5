"""Tool-adoption reward signals: shaped return, tool bonus, gradient-band task curation. Paper: seed
002, "Screenshots or Tools?" (Fan et al.), Section 5.1, Eqs. (3)-(4), Appendix F and Table 6. The
Evaluator scores the return and the bonus (``Score.adoption``); their combination into per-step
advantages (Eq. 4, the bonus after normalisation) is ``policies.adoption_advantages``.

A trajectory ``tau`` of ``T`` steps (model turns, 1-based, as ``ToolCallRecord.turn`` counts them) with
outcome ``succ(tau)`` in ``{+1, -1}`` gets the return, Eq. (3)::

    R(tau) = succ(tau) - lambda_len * T / T_max - lambda_cap * 1[T >= T_max]

Returns are z-scored within the group of ``G`` rollouts of one task (``mu_x``, ``sigma_x``) and broadcast
uniformly over the trajectory's steps with a ``1/T`` factor (Dr. GRPO-style length debiasing); every step
``t`` is one training sample with advantage, Eq. (4)::

    A_t = (1/T) * (R(tau) - mu_x) / sigma_x  +  lambda_mcp * b_t

``sigma_x`` follows ``policies.advantages`` (the paper does not say): the sample std (``ddof=1``) plus
``eps``, and a group whose returns are all equal (or of one member) gets exactly 0. The bonus
``b_t`` in ``{0, 1}`` is added *after* normalisation (Section 5.1 "A dense tool bonus that survives
normalization"; inside ``R`` it is diluted to ~1e-4). It fires for an execution-successful call of a
non-read-only tool whose (tool, arguments) key has not appeared earlier in the trajectory; it is not
gated on task success.

Defaults (Table 6): ``lambda_len = 0.05``, ``T_max = max_steps = 50``, ``lambda_cap = 0.2``,
``lambda_mcp = 0.1`` (0 in the outcome-only and matched-training runs), ``G = 8``.

Choices where the paper is silent:

- ``read_only=None`` (the server gave no ``readOnlyHint``) counts as *not* read-only: the MCP spec's
  default for ``readOnlyHint`` is ``false``, so the bonus may fire.
- "Appeared earlier" means any earlier call with that key, failed or not: a key whose first call
  failed cannot earn the bonus on a retry (the literal reading; it also blocks fail-then-retry farming).
- A parse error (empty tool name) never fires. ``b_t`` is an indicator: at most ``lambda_mcp`` a step.

Gradient-band curation (Section 5.1 "Data split and gradient-band curation", Appendix F): a task is
trained on only if its empirical pass rate over ``G = 8`` temperature-1 rollouts lies strictly inside
``(0.1, 0.9)``; outside it the group has zero variance and zero gradient. The paper profiles the band
once before launch for its reported runs, and says elsewhere it is "re-profiled as the policy
improves" without a schedule: ``reprofile_every=None`` (default) profiles once, an int ``N`` asks for a
fresh profile every ``N`` steps. Unprofiled tasks are kept (trainable until a profile says otherwise).
Table 6's "Acc. filter (0.05, 0.95)" is a separate knob and is not implemented here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from specs.trajectory import ToolCallRecord

LAMBDA_LEN = 0.05
LAMBDA_CAP = 0.2
LAMBDA_MCP = 0.1
T_MAX = 50
GROUP_SIZE = 8
BAND = (0.1, 0.9)


def shaped_return(
    success: bool,
    steps: int,
    max_steps: int,
    *,
    lambda_len: float = LAMBDA_LEN,
    lambda_cap: float = LAMBDA_CAP,
) -> float:
    """Eq. (3): ``+-1`` outcome minus the length and step-cap tie-breakers."""
    if steps < 0:
        raise ValueError(f"shaped_return: steps must be >= 0, got {steps}")
    if max_steps < 1:
        raise ValueError(f"shaped_return: max_steps (T_max) must be >= 1, got {max_steps}")
    outcome = 1.0 if success else -1.0
    return outcome - lambda_len * steps / max_steps - lambda_cap * float(steps >= max_steps)


def call_key(call: ToolCallRecord) -> str:
    """The (tool, arguments) key: argument order and whitespace do not matter."""
    return json.dumps([call.name, call.arguments], sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def tool_bonus(calls: Sequence[ToolCallRecord], *, lambda_mcp: float = LAMBDA_MCP) -> dict[int, float]:
    """``lambda_mcp * b_t`` for every turn that made a call (0.0 where it does not fire); other turns are absent."""
    seen: set[str] = set()
    bonus: dict[int, float] = {}
    for call in sorted(calls, key=lambda c: c.turn):
        key = call_key(call)
        fires = call.ok and call.read_only is not True and call.name != "" and key not in seen
        seen.add(key)
        bonus[call.turn] = max(bonus.get(call.turn, 0.0), lambda_mcp if fires else 0.0)
    return bonus


class PassRateCurator:
    """Keeps the tasks whose profiled pass rate is strictly inside ``band``; checkpointable as plain JSON."""

    def __init__(
        self, band: tuple[float, float] = BAND, samples: int = GROUP_SIZE, reprofile_every: int | None = None
    ) -> None:
        lo, hi = band
        if not 0.0 <= lo < hi <= 1.0:
            raise ValueError(f"PassRateCurator: band must satisfy 0 <= lo < hi <= 1, got {band}")
        if samples < 1:
            raise ValueError(f"PassRateCurator: samples (G) must be >= 1, got {samples}")
        if reprofile_every is not None and reprofile_every < 1:
            raise ValueError(f"PassRateCurator: reprofile_every must be None or >= 1, got {reprofile_every}")
        self.band = (float(lo), float(hi))
        self.samples = samples
        self.reprofile_every = reprofile_every
        self._profiles: dict[str, tuple[int, int]] = {}  # task id -> (passes, rollouts)

    def update(self, task_id: str, successes: Sequence[bool]) -> None:
        """Record (or replace) a task's profile from its ``samples`` rollouts."""
        if len(successes) != self.samples:
            raise ValueError(
                f"PassRateCurator.update: task {task_id!r} got {len(successes)} outcomes, expected samples={self.samples}"
            )
        self._profiles[task_id] = (sum(bool(s) for s in successes), len(successes))

    def pass_rate(self, task_id: str) -> float | None:
        """The profiled pass rate, or ``None`` if the task was never profiled."""
        prof = self._profiles.get(task_id)
        return None if prof is None else prof[0] / prof[1]

    def trainable(self, task_ids: Sequence[str]) -> list[str]:
        """The given tasks, in order, less those profiled outside the open band; unprofiled ones stay."""
        lo, hi = self.band
        return [t for t in task_ids if (p := self.pass_rate(t)) is None or lo < p < hi]

    def due(self, step: int) -> bool:
        """Whether to profile at ``step``: before any profile exists, and every ``reprofile_every`` steps."""
        if not self._profiles:
            return True
        return self.reprofile_every is not None and step > 0 and step % self.reprofile_every == 0

    def state_dict(self) -> dict[str, Any]:
        return {"profiles": {t: [p, n] for t, (p, n) in self._profiles.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        raw = state.get("profiles")
        if not isinstance(raw, Mapping):
            raise ValueError(f"PassRateCurator.load_state_dict: expected a 'profiles' mapping, got {raw!r}")
        profiles: dict[str, tuple[int, int]] = {}
        for task_id, entry in raw.items():
            ok = isinstance(entry, list | tuple) and len(entry) == 2 and all(type(x) is int for x in entry)
            if not (ok and 0 <= entry[0] <= entry[1] and entry[1] >= 1):
                raise ValueError(
                    f"PassRateCurator.load_state_dict: task {task_id!r} has {entry!r}, expected [passes, n] with 0 <= passes <= n, n >= 1"
                )
            profiles[str(task_id)] = (entry[0], entry[1])
        self._profiles = profiles
