"""Pins the GRPO group-advantage formula on worked examples."""

from __future__ import annotations

import math

import pytest
import torch

from policies.advantages import group_advantages, grpo_advantages


def test_grpo_advantages_use_the_sample_std_on_a_worked_example() -> None:
    # mean 0.25; sample std = sqrt((0.5625 + 3 * 0.0625) / 3) = 0.5; population std would be 0.433.
    adv = grpo_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), eps=0.0)
    assert adv.tolist() == pytest.approx([1.5, -0.5, -0.5, -0.5])


def test_grpo_advantages_add_eps_to_the_std() -> None:
    adv = grpo_advantages(torch.tensor([2.0, 0.0]), eps=0.1)  # sample std sqrt(2)
    expected = 1.0 / (math.sqrt(2.0) + 0.1)
    assert adv.tolist() == pytest.approx([expected, -expected])


def test_grpo_advantages_without_std_normalisation_only_center_the_rewards() -> None:
    adv = grpo_advantages(torch.tensor([3.0, 1.0, 2.0]), std_normalize=False)
    assert adv.tolist() == pytest.approx([1.0, -1.0, 0.0])


def test_a_group_with_equal_rewards_gets_exactly_zero_advantages() -> None:
    assert grpo_advantages(torch.tensor([0.7, 0.7, 0.7]), eps=0.0).tolist() == [0.0, 0.0, 0.0]
    assert grpo_advantages(torch.tensor([5.0])).tolist() == [0.0]


def test_grpo_advantages_accept_integer_rewards() -> None:
    adv = grpo_advantages(torch.tensor([1, 0]), eps=0.0)
    assert adv.dtype == torch.float32
    assert adv.tolist() == pytest.approx([1 / math.sqrt(2), -1 / math.sqrt(2)])


def test_grpo_advantages_refuse_a_batch_shaped_input() -> None:
    with pytest.raises(ValueError, match=r"\[G\]"):
        grpo_advantages(torch.zeros(2, 3))


def test_group_advantages_normalise_each_group_separately_and_keep_input_order() -> None:
    rewards = [1.0, 5.0, 0.0, 5.0, 0.0, 0.0]
    groups = ["a", "b", "a", "b", "a", "a"]
    adv = group_advantages(rewards, groups, eps=0.0)
    assert adv == pytest.approx([1.5, 0.0, -0.5, 0.0, -0.5, -0.5])


def test_group_advantages_refuse_mismatched_lengths() -> None:
    with pytest.raises(ValueError, match="2 rewards but 1 group ids"):
        group_advantages([1.0, 0.0], ["a"])
