"""Pins bidirectional gradient surgery (paper 000, Eq. 11) and the conflict diagnostics on worked examples."""

from __future__ import annotations

import math

import pytest
import torch

from policies import surgery
from policies.surgery import ConflictTracker, Gram, cosine, gram, project


def _conflicting_pair(n: int, dtype: torch.dtype, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, generator=g, dtype=torch.float64)
    b = torch.randn(n, generator=g, dtype=torch.float64) - 0.5 * a  # pull b against a
    assert float(a @ b) < 0
    return a.to(dtype), b.to(dtype)


def test_project_on_a_worked_two_dimensional_example() -> None:
    # g_R = (1, 0), g_T = (-1, 1): <g_R, g_T> = -1 < 0, ||g_T||^2 = 2, ||g_R||^2 = 1.
    # g~_R = (1, 0) - (-1/2)(-1, 1) = (0.5, 0.5);  g~_T = (-1, 1) - (-1/1)(1, 0) = (0, 1).
    # g_update = (0.5, 1.5) (the plain sum would be (0, 1)).
    r, t = torch.tensor([1.0, 0.0]), torch.tensor([-1.0, 1.0])
    new_r, new_t = project(r, t)
    assert new_r.tolist() == pytest.approx([0.5, 0.5])
    assert new_t.tolist() == pytest.approx([0.0, 1.0])
    assert (new_r + new_t).tolist() == pytest.approx([0.5, 1.5])
    assert cosine(r, t) == pytest.approx(-1.0 / math.sqrt(2.0))


def test_the_projected_pair_is_compatible_after_surgery() -> None:
    # <g~_R, g~_T> = -<g_R, g_T> (1 - cos^2) = 1 * (1 - 1/2) = 0.5 on the worked example: (0.5, 0.5).(0, 1).
    new_r, new_t = project(torch.tensor([1.0, 0.0]), torch.tensor([-1.0, 1.0]))
    assert float(new_r @ new_t) == pytest.approx(0.5)


@pytest.mark.parametrize(("dtype", "tol"), [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_each_projection_is_orthogonal_to_the_other_original_gradient(dtype: torch.dtype, tol: float) -> None:
    r, t = _conflicting_pair(1000, dtype)
    new_r, new_t = project(r, t)
    scale = float(r.double().norm() * t.double().norm())
    assert abs(float(new_r.double() @ t.double())) / scale < tol
    assert abs(float(new_t.double() @ r.double())) / scale < tol


def test_exactly_opposite_gradients_cancel_each_other() -> None:
    # g_R = (1, 0), g_T = (-2, 0): g~_R = (1, 0) - (-2/4)(-2, 0) = (0, 0); g~_T = (-2, 0) - (-2/1)(1, 0) = (0, 0).
    new_r, new_t = project(torch.tensor([1.0, 0.0]), torch.tensor([-2.0, 0.0]))
    assert new_r.tolist() == [0.0, 0.0] and new_t.tolist() == [0.0, 0.0]


@pytest.mark.parametrize("t", [[1.0, 1.0], [0.0, 3.0]], ids=["compatible", "orthogonal"])
def test_compatible_or_orthogonal_gradients_are_returned_unchanged(t: list[float]) -> None:
    r, g_t = torch.tensor([1.0, 0.0]), torch.tensor(t)
    new_r, new_t = project(r, g_t)
    assert new_r is r and new_t is g_t


def test_a_zero_gradient_leaves_both_unchanged_and_has_cosine_zero() -> None:
    zero, t = torch.zeros(3), torch.tensor([1.0, -2.0, 3.0])
    assert project(zero, t) == (zero, t)
    assert project(t, zero) == (t, zero)
    assert cosine(zero, t) == 0.0
    empty = torch.zeros(0)
    assert project(empty, empty) == (empty, empty)


def test_project_is_symmetric_neither_gradient_is_the_anchor() -> None:
    a, b = _conflicting_pair(257, torch.float32, seed=3)
    ab_r, ab_t = project(a, b)
    ba_r, ba_t = project(b, a)
    assert torch.equal(ab_r, ba_t) and torch.equal(ab_t, ba_r)


def test_project_keeps_each_dtype_and_never_modifies_its_inputs() -> None:
    r, t = _conflicting_pair(64, torch.bfloat16)
    r_before, t_before = r.clone(), t.clone()
    new_r, new_t = project(r, t)
    assert new_r.dtype == torch.bfloat16 and new_t.dtype == torch.bfloat16
    assert torch.equal(r, r_before) and torch.equal(t, t_before)
    mixed_r, mixed_t = project(r.float(), t)
    assert mixed_r.dtype == torch.float32 and mixed_t.dtype == torch.bfloat16


def test_non_finite_gradients_pass_through_and_have_cosine_nan() -> None:
    r, t = torch.tensor([float("nan"), 1.0]), torch.tensor([-1.0, -1.0])
    assert project(r, t) == (r, t)
    assert math.isnan(cosine(r, t))


def test_project_refuses_mismatched_shapes_and_integer_tensors() -> None:
    with pytest.raises(ValueError, match="same shape"):
        project(torch.zeros(3), torch.zeros(4))
    with pytest.raises(ValueError, match="floating-point"):
        project(torch.zeros(3, dtype=torch.long), torch.zeros(3))


def test_gram_coefficients_on_the_worked_example() -> None:
    # <g_R, g_T> = -1, ||g_R||^2 = 1, ||g_T||^2 = 2: c_R = -1/2, c_T = -1/1.
    g = gram(torch.tensor([1.0, 0.0]), torch.tensor([-1.0, 1.0]))
    assert g == Gram(rt=-1.0, rr=1.0, tt=2.0)
    assert g.coefficients() == (-0.5, -1.0)
    assert Gram(rt=1.0, rr=1.0, tt=2.0).coefficients() == (0.0, 0.0)


def test_gram_accumulates_chunks_in_float64(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(surgery, "_CHUNK", 3)  # 10 elements -> chunks of 3, 3, 3, 1
    r, t = _conflicting_pair(10, torch.float32, seed=1)
    rd, td = r.double(), t.double()
    assert gram(r, t) == pytest.approx((float(rd @ td), float(rd @ rd), float(td @ td)), rel=1e-12)


def test_summed_per_piece_grams_project_pieces_like_the_whole() -> None:
    # A sharded caller: all-reduce the per-piece Gram entries, then apply the coefficients piecewise.
    r, t = _conflicting_pair(20, torch.float64, seed=2)
    pieces = [gram(r[:7], t[:7]), gram(r[7:], t[7:])]
    total = Gram(*(sum(p[i] for p in pieces) for i in range(3)))
    c_r, c_t = total.coefficients()
    whole_r, whole_t = project(r, t)
    assert torch.allclose(torch.cat([r[:7] - c_r * t[:7], r[7:] - c_r * t[7:]]), whole_r)
    assert torch.allclose(torch.cat([t[:7] - c_t * r[:7], t[7:] - c_t * r[7:]]), whole_t)


def test_a_precomputed_gram_gives_the_same_projection_and_is_not_recomputed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    r, t = torch.tensor([1.0, 0.0]), torch.tensor([-1.0, 1.0])
    pair = gram(r, t)
    monkeypatch.setattr(surgery, "gram", lambda *_: pytest.fail("gram recomputed"))
    new_r, new_t = project(r, t, pair=pair)
    assert new_r.tolist() == pytest.approx([0.5, 0.5]) and new_t.tolist() == pytest.approx([0.0, 1.0])
    with pytest.raises(ValueError, match="same shape"):
        project(torch.zeros(3), torch.zeros(4), pair=pair)


def test_flatten_grads_and_assign_grads_round_trip_a_models_gradients() -> None:
    model = torch.nn.Linear(3, 2)  # weight [2, 3], bias [2]
    params = list(model.parameters())
    model.weight.grad = torch.arange(6.0).view(2, 3)  # the bias has no .grad yet: zeros
    flat = surgery.flatten_grads(params)
    assert flat.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 0.0, 0.0]
    surgery.assign_grads(params, flat * 2 + 1)
    assert model.weight.grad.tolist() == [[1.0, 3.0, 5.0], [7.0, 9.0, 11.0]]
    assert model.bias.grad is not None and model.bias.grad.tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="expected a flat vector of 8 elements"):
        surgery.assign_grads(params, torch.zeros(7))


def test_conflict_tracker_accumulates_the_negative_cosine_integral() -> None:
    # cosines 0.5, -0.2, 0.1, -0.3: integral = min(., 0) summed = -0.2 - 0.3 = -0.5; 2 of 4 steps conflict.
    tracker = ConflictTracker()
    logged = [tracker.update(c) for c in (0.5, -0.2, 0.1, -0.3)]
    assert logged[0]["grad_angle_deg"] == pytest.approx(60.0)  # acos(0.5)
    assert logged[0]["negative_cosine_integral"] == 0.0
    assert logged[1]["negative_cosine_integral"] == pytest.approx(-0.2)
    assert logged[-1]["negative_cosine_integral"] == pytest.approx(-0.5)
    assert logged[-1]["conflict_frac"] == 0.5
    assert (tracker.steps, tracker.conflicts) == (4, 2)


def test_conflict_tracker_skips_a_non_finite_cosine_and_refuses_one_out_of_range() -> None:
    tracker = ConflictTracker()
    metrics = tracker.update(math.nan)
    assert tracker.steps == 0 and math.isnan(metrics["grad_angle_deg"])
    assert metrics["conflict_frac"] == 0.0
    with pytest.raises(ValueError, match=r"\[-1, 1\]"):
        tracker.update(1.5)
