"""Bidirectional gradient surgery between the reasoning and tool objectives (paper 000, §3.3.3, Eq. 11).

``g_R`` and ``g_T`` are the gradients of the reasoning-reward and tool-reward terms of Eq. 10 with
respect to the shared parameters, flattened to vectors (any sign convention, as long as both use
the same one: the rule depends only on their inner product). Following PCGrad (Yu et al. 2020),
but symmetric, with both projections computed from the ORIGINAL pair:

    g~_R = g_R - (<g_R, g_T> / ||g_T||^2) g_T     if <g_R, g_T> < 0, else g_R
    g~_T = g_T - (<g_T, g_R> / ||g_R||^2) g_R     if <g_R, g_T> < 0, else g_T
    g_update = g~_R + g~_T

Neither objective is a privileged anchor. On a conflicting step ``<g~_R, g_T> = <g~_T, g_R> = 0``
and the projected pair is itself compatible: ``<g~_R, g~_T> = -<g_R, g_T> (1 - cos^2) >= 0``. A zero
gradient cannot conflict and leaves both unchanged. The paper gives no hyperparameter for this step.

The three inner products are accumulated in float64 (``gram``); the update itself is one fused
``a - c * b`` in the input dtype, so no float64 copy of a parameter-sized vector is ever made. A
caller whose gradients are sharded or split per parameter sums the per-piece ``Gram`` entries
(an all-reduce) and applies ``Gram.coefficients`` piecewise. ``flatten_grads`` / ``assign_grads``
move a model's ``.grad`` to one vector and back, for a caller whose gradients are whole (ZeRO-0).

Diagnostics (paper 000 §4.3, Fig. 2): the per-step cosine between ``g_R`` and ``g_T`` ("gradient-angle
trajectories", Fig. 2a) and the "cumulative negative-cosine integral" (Fig. 2b), taken here as

    I_n = sum_{k <= n} min(cos_k, 0)       (<= 0; more negative = more accumulated conflict)

The paper does not say whether it measures before or after projection and warns that this changes
the reading; ``ConflictTracker`` should be fed the cosine of the ORIGINAL pair (before surgery).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch

_CHUNK = 1 << 22  # elements cast to float64 at a time: 32 MiB of scratch, whatever the model size


class Gram(NamedTuple):
    """Inner products of a gradient pair: ``rt = <g_R, g_T>``, ``rr = ||g_R||^2``, ``tt = ||g_T||^2``."""

    rt: float
    rr: float
    tt: float

    @property
    def conflict(self) -> bool:
        """``<g_R, g_T> < 0`` with both gradients nonzero and every entry finite."""
        finite = all(math.isfinite(x) for x in self)
        return finite and self.rr > 0.0 and self.tt > 0.0 and self.rt < 0.0

    @property
    def cosine(self) -> float:
        """``<g_R, g_T> / (||g_R|| ||g_T||)`` in [-1, 1]; 0.0 when either is zero, nan when not finite."""
        if not all(math.isfinite(x) for x in self):
            return math.nan
        if self.rr == 0.0 or self.tt == 0.0:
            return 0.0
        return max(-1.0, min(1.0, self.rt / math.sqrt(self.rr * self.tt)))

    def coefficients(self) -> tuple[float, float]:
        """``(c_R, c_T)`` with ``g~_R = g_R - c_R g_T`` and ``g~_T = g_T - c_T g_R``; (0, 0) unless conflicting."""
        if not self.conflict:
            return 0.0, 0.0
        return self.rt / self.tt, self.rt / self.rr


def gram(g_reasoning: torch.Tensor, g_tool: torch.Tensor) -> Gram:
    """The pair's inner products, accumulated in float64 chunk by chunk (tensors of any equal shape)."""
    if g_reasoning.shape != g_tool.shape:
        raise ValueError(
            f"gram: g_reasoning {tuple(g_reasoning.shape)} and g_tool {tuple(g_tool.shape)} "
            "must have the same shape"
        )
    if not (g_reasoning.is_floating_point() and g_tool.is_floating_point()):
        raise ValueError(
            f"gram: expected floating-point gradients, got {g_reasoning.dtype} and {g_tool.dtype}"
        )
    r, t = g_reasoning.reshape(-1), g_tool.reshape(-1)
    acc = torch.zeros(3, dtype=torch.float64, device=r.device)
    for start in range(0, r.numel(), _CHUNK):
        a = r[start : start + _CHUNK].double()
        b = t[start : start + _CHUNK].double()
        acc += torch.stack([a @ b, a @ a, b @ b])
    rt, rr, tt = acc.tolist()
    return Gram(rt, rr, tt)


def project(
    g_reasoning: torch.Tensor, g_tool: torch.Tensor, *, pair: Gram | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 11: ``(g~_R, g~_T)``, both from the original pair; inputs returned as they are when not conflicting.

    Never modifies its inputs; outputs keep each input's dtype. Non-finite gradients are passed
    through unchanged, so an optimizer's overflow check still sees them. ``pair`` is the pair's
    ``gram`` when the caller already computed it (the learner logs its cosine): it is not recomputed.
    """
    if pair is None:
        pair = gram(g_reasoning, g_tool)
    elif g_reasoning.shape != g_tool.shape:
        raise ValueError(
            f"project: g_reasoning {tuple(g_reasoning.shape)} and g_tool {tuple(g_tool.shape)} "
            "must have the same shape"
        )
    c_r, c_t = pair.coefficients()
    if c_r == 0.0 and c_t == 0.0:
        return g_reasoning, g_tool
    new_r = torch.add(g_reasoning, g_tool, alpha=-c_r).to(g_reasoning.dtype)
    new_t = torch.add(g_tool, g_reasoning, alpha=-c_t).to(g_tool.dtype)
    return new_r, new_t


def cosine(g_reasoning: torch.Tensor, g_tool: torch.Tensor) -> float:
    """Cosine of the angle between the two gradients; 0.0 if either is zero."""
    return gram(g_reasoning, g_tool).cosine


def flatten_grads(params: Sequence[torch.nn.Parameter]) -> torch.Tensor:
    """The ``.grad`` of ``params`` as one flat vector, in order (zeros for a parameter without one)."""
    return torch.cat(
        [(p.grad.detach() if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params]
    )


def assign_grads(params: Sequence[torch.nn.Parameter], flat: torch.Tensor) -> None:
    """Set each parameter's ``.grad`` to its slice of ``flat`` (the layout of ``flatten_grads``), in its dtype."""
    expected = sum(p.numel() for p in params)
    if flat.dim() != 1 or flat.numel() != expected:
        raise ValueError(
            f"assign_grads: expected a flat vector of {expected} elements, got shape {tuple(flat.shape)}"
        )
    offset = 0
    for p in params:
        n = p.numel()
        p.grad = flat[offset : offset + n].view_as(p).to(p.dtype).clone()
        offset += n


@dataclass
class ConflictTracker:
    """Running gradient-conflict diagnostics for logging (paper 000 Fig. 2); feed it one cosine per step."""

    steps: int = 0
    """Steps with a finite cosine seen so far."""
    conflicts: int = 0
    """Steps whose cosine was negative."""
    negative_cosine_integral: float = 0.0
    """``sum_k min(cos_k, 0)``: the cumulative negative-cosine integral, <= 0."""

    def update(self, cos: float) -> dict[str, float]:
        """Record one step's cosine; returns the metrics to log (a non-finite cosine is not counted)."""
        finite = math.isfinite(cos)
        if finite:
            if not -1.0 - 1e-6 <= cos <= 1.0 + 1e-6:
                raise ValueError(f"ConflictTracker.update: cos must lie in [-1, 1], got {cos}")
            cos = max(-1.0, min(1.0, cos))
            self.steps += 1
            self.conflicts += cos < 0.0
            self.negative_cosine_integral += min(cos, 0.0)
        return {
            "grad_cosine": cos,
            "grad_angle_deg": math.degrees(math.acos(cos)) if finite else math.nan,
            "negative_cosine_integral": self.negative_cosine_integral,
            "conflict_frac": self.conflicts / max(self.steps, 1),
        }
