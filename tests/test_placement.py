"""Where the generator and the learner run: the device plan of each placement."""

from __future__ import annotations

import pytest

from actors.placement import DevicePlan, device_plan


def test_on_cpu_nothing_is_reserved_and_nothing_sleeps() -> None:
    assert device_plan("colocated", 0) == DevicePlan() == device_plan("async", 0)


def test_colocated_shares_one_gpu_and_the_engine_sleeps_while_the_learner_trains() -> None:
    plan = device_plan("colocated", 8)
    assert plan.bundles == ({"GPU": 1.0},)
    assert (plan.generator_bundle, plan.learner_bundle) == (0, 0)
    assert plan.generator_gpus + plan.learner_gpus == 1.0 and plan.sleep_while_training


def test_async_puts_generation_and_training_on_separate_gpus() -> None:
    plan = device_plan("async", 2)
    assert plan.bundles == ({"GPU": 1.0}, {"GPU": 1.0})
    assert (plan.generator_bundle, plan.learner_bundle) == (0, 1)
    assert (plan.generator_gpus, plan.learner_gpus) == (1.0, 1.0) and not plan.sleep_while_training


def test_async_on_one_gpu_is_refused_with_what_to_use_instead() -> None:
    with pytest.raises(ValueError, match="async needs 2 GPUs.*use placement: colocated"):
        device_plan("async", 1)


def test_an_evaluation_takes_one_gpu_for_the_engine_alone() -> None:
    plan = device_plan("async", 1, learner=False)
    assert plan.bundles == ({"GPU": 1.0},) and plan.generator_gpus == 1.0 and not plan.sleep_while_training
