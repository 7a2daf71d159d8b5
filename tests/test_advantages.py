"""Pins the GRPO / Dr. GRPO group-advantage formulas and DAPO's dynamic-sampling filter on worked examples."""

from __future__ import annotations

import math

import pytest
import torch

from policies.advantages import group_advantages, grpo_advantages, keep_group, keep_groups, success_rate


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


def test_dr_grpo_advantages_of_one_success_in_four_are_the_centred_rewards() -> None:
    # mean 0.25, no std division: [1 - 0.25, 0 - 0.25, ...]
    adv = grpo_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), std_normalize=False)
    assert adv.tolist() == pytest.approx([0.75, -0.25, -0.25, -0.25])


def test_success_rate_counts_rewards_at_or_above_the_threshold() -> None:
    assert success_rate([1.0, 0.0, 0.5, 1.0]) == 0.5  # 2 of 4 reach 1.0
    assert success_rate([1.0, 0.0, 0.5, 1.0], threshold=0.5) == 0.75  # 0.5 counts: >=, not >


def test_success_rate_of_an_empty_group_is_an_error() -> None:
    with pytest.raises(ValueError, match="rewards is empty"):
        success_rate([])


def test_the_default_band_drops_exactly_the_all_fail_and_all_success_groups() -> None:
    assert keep_group([1.0, 0.0, 0.0, 0.0])  # acc 0.25
    assert keep_group([1.0, 1.0, 1.0, 0.0])  # acc 0.75
    assert not keep_group([0.0, 0.0, 0.0, 0.0])  # acc 0
    assert not keep_group([1.0, 1.0, 1.0, 1.0])  # acc 1


def test_the_band_is_open_at_both_ends() -> None:
    # G = 10, band (0.1, 0.9): acc 0.1 sits on the edge and is dropped, acc 0.2 is kept.
    one = [1.0] + [0.0] * 9
    two = [1.0, 1.0] + [0.0] * 8
    nine = [1.0] * 9 + [0.0]
    assert not keep_group(one, band=(0.1, 0.9))
    assert keep_group(two, band=(0.1, 0.9))
    assert not keep_group(nine, band=(0.1, 0.9))


def test_paper_002_band_keeps_the_same_groups_as_dapo_for_groups_of_eight() -> None:
    # acc takes values k/8; (0.05, 0.95) and (0, 1) both keep exactly k = 1..7.
    for k in range(9):
        rewards = [1.0] * k + [0.0] * (8 - k)
        assert keep_group(rewards, band=(0.05, 0.95)) == keep_group(rewards) == (0 < k < 8)


def test_graded_rewards_without_a_full_success_are_dropped_by_the_band_but_kept_without_it() -> None:
    rewards = [0.2, 0.7, 0.4]  # acc 0 at threshold 1.0, but the rewards differ
    assert not keep_group(rewards)
    assert keep_group(rewards, band=None)


def test_all_equal_rewards_are_dropped_even_without_a_band() -> None:
    assert not keep_group([0.7, 0.7, 0.7], band=None)
    assert not keep_group([0.7, 0.7, 0.7], threshold=0.5, band=(-1.0, 2.0))  # acc 1, inside this band
    assert not keep_group([1.0])  # a group of one is all-equal


def test_keep_group_refuses_an_empty_band() -> None:
    with pytest.raises(ValueError, match="low < high"):
        keep_group([1.0, 0.0], band=(0.5, 0.5))


def test_keep_groups_decides_per_group_id_in_order_of_first_appearance() -> None:
    rewards = [1.0, 0.0, 0.0, 1.0, 0.0, 1.0]
    groups = ["a", "b", "a", "b", "c", "c"]  # a: [1, 0], b: [0, 1], c: [0, 1]
    assert keep_groups(rewards, groups) == {"a": True, "b": True, "c": True}
    assert list(keep_groups([0.0, 1.0, 1.0], ["z", "y", "y"])) == ["z", "y"]
    assert keep_groups([0.0, 1.0, 1.0], ["z", "y", "y"]) == {"z": False, "y": False}
    assert keep_groups([], []) == {}


def test_keep_groups_refuse_mismatched_lengths() -> None:
    with pytest.raises(ValueError, match="3 rewards but 2 group ids"):
        keep_groups([1.0, 0.0, 1.0], ["a", "a"])
