"""Pure glue between the pipeline and the learner: samples, advantages (episode metrics: test_metrics.py)."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace
from typing import Any, cast

import pytest

from launch.tasks import TaskStream
from policies.batch import adoption_samples, demonstration_samples, rl_samples, why_no_demonstration
from specs.config import load_run_config
from specs.trajectory import AdoptionScore, Score, ToolCallRecord, Trajectory, Verdict


def score(success: bool, **families: Any) -> Score:
    """What the Evaluator returns for an episode with one evaluator, and the given families."""
    return Score.of((Verdict(func="raw", op="=", passed=success),), **families)


def traj(
    group: str, reward: float | None, *, status: str = "ok", calls: tuple[str | None, ...] = ()
) -> Trajectory:
    return Trajectory(
        task_id=group,
        group_id=group,
        token_ids=[1, 2, 3, 4],
        trainable=[0, 0, 1, 1],
        logprobs=[0.0, 0.0, -0.5, -0.25],
        versions=[0],
        messages=[],
        tool_calls=[
            ToolCallRecord(
                turn=i + 1,
                name="t",
                arguments={},
                ok=kind is None,
                error_kind=kind,
                latency_s=0.0,
                output_bytes=1,
            )
            for i, kind in enumerate(calls)
        ],
        num_turns=len(calls) + 1,
        status=status,  # type: ignore[arg-type]
        score=None if reward is None else score(reward >= 1.0),
    )


def test_rl_samples_normalise_within_each_group_and_skip_groups_without_signal() -> None:
    groups = [
        [traj("a", 1.0), traj("a", 0.0), traj("a", 0.0), traj("a", 0.0)],
        [traj("b", 1.0), traj("b", 1.0)],
    ]
    samples = rl_samples(groups)
    assert [s.advantage for s in samples] == pytest.approx([1.5, -0.5, -0.5, -0.5], abs=1e-5)
    assert samples[0].token_ids == [1, 2, 3, 4] and samples[0].logprobs == [0.0, 0.0, -0.5, -0.25]
    assert len(rl_samples(groups, keep_zero=True)) == 6


def test_a_dapo_band_drops_all_fail_and_all_pass_groups_even_when_zero_advantages_are_kept() -> None:
    groups = [
        [traj("mixed", 1.0), traj("mixed", 0.0)],
        [traj("fail", 0.0), traj("fail", 0.0)],
        [traj("pass", 1.0), traj("pass", 1.0)],
    ]
    assert len(rl_samples(groups, keep_zero=True)) == 6
    kept = rl_samples(groups, keep_zero=True, band=(0.0, 1.0))
    assert len(kept) == 2 and [s.advantage for s in kept] == pytest.approx([0.7071, -0.7071], abs=1e-4)


def test_rl_samples_refuse_a_failed_or_unscored_trajectory() -> None:
    with pytest.raises(ValueError, match="only complete, scored groups"):
        rl_samples([[traj("a", 1.0), traj("a", None, status="infra_failed")]])


def test_demonstrations_keep_only_successful_expert_episodes() -> None:
    kept = demonstration_samples([traj("a", 1.0), traj("b", 0.0), traj("c", 1.0, status="eval_failed")])
    assert len(kept) == 1 and kept[0].advantage == 0.0


def test_task_stream_is_seeded_and_visits_every_task_once_per_pass() -> None:
    tasks = list(range(10))
    first, second = TaskStream(tasks, seed=3), TaskStream(tasks, seed=3)
    assert first.take(10) == second.take(10)
    assert sorted(first.take(10)) == tasks
    assert first.position == 20
    assert TaskStream(tasks, seed=4).take(10) != TaskStream(tasks, seed=3).take(10)


def test_a_curated_task_stream_skips_refused_tasks_in_the_same_order_and_says_when_none_is_left() -> None:
    tasks = list(range(10))
    everything = TaskStream(tasks, seed=3).take(10)
    even = TaskStream(tasks, seed=3).take(5, keep=lambda t: t % 2 == 0)
    assert even == [t for t in everything if t % 2 == 0]
    with pytest.raises(RuntimeError, match="no training task"):
        TaskStream(tasks, seed=3).take(1, keep=lambda t: False)
    # one kept task: the next one can lie almost two passes away (first in a pass, last in the next)
    assert TaskStream(tasks, seed=3).take(20, keep=lambda t: t == 7) == [7] * 20


def test_curation_profiles_every_task_keeps_those_inside_the_band_and_shows_them(
    tmp_path: Any, capsys: Any
) -> None:
    import anyio

    from actors.groups import Group
    from launch.report import Reporter
    from launch.tasks import CuratedTasks

    outcomes = {"mixed": [1.0, 0.0], "solved": [1.0, 1.0], "failed": [0.0, 0.0], "lost": [1.0, None]}
    tasks = [SimpleNamespace(instance_id=name) for name in outcomes]

    class Pipeline:
        async def collect(
            self, tasks: Any, samples: int, sampling: Any, limits: Any, advance: Any
        ) -> list[Group]:
            assert samples == 2
            advance(n=len(tasks))
            return [
                Group(
                    task_id=t.instance_id,
                    group_id=t.instance_id,
                    trajectories=[
                        traj(t.instance_id, r, status="ok" if r is not None else "infra_failed")
                        for r in outcomes[t.instance_id]
                    ],
                )
                for t in tasks
            ]

    class Tok:
        def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
            return "text"

    cfg = load_run_config(
        None,
        [
            f"output_dir={tmp_path}",
            "wandb.mode=disabled",
            "train.curation_samples=2",
            "rollout.tasks_per_step=2",
        ],
    )
    session = SimpleNamespace(
        cfg=cfg,
        reporter=Reporter(cfg, "run-1"),
        tokenizer=Tok(),
        pipeline=Pipeline,
        sampling=None,
        limits=None,
    )
    curated = CuratedTasks(cast(Any, session), TaskStream(cast(Any, tasks), seed=0))
    anyio.run(curated.prepare, 1)
    # inside (0.1, 0.9): "mixed"; "lost" lost an episode, so it is unprofiled and stays
    assert {t.instance_id for t in curated.draw(1) + curated.draw(2)} == {"mixed", "lost"}
    assert (
        "2 of 4 tasks have a pass rate in (0.1, 0.9): mixed 0.50, lost unprofiled" in capsys.readouterr().out
    )
    written = (tmp_path / cfg.run_name / "trajectories" / "curation_0001.jsonl").read_text().splitlines()
    assert len(written) == 8  # every profiled episode kept, as a step's are
    session.reporter.close()


def test_progress_bars_opened_inside_another_share_the_terminal_display(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # rich allows one live display at a time: an eval bar inside the RL steps' bar must join it.
    from launch.report import Reporter
    from specs.config import load_run_config

    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    reporter = Reporter(load_run_config(None, [f"output_dir={tmp_path}", "wandb.mode=disabled"]), "run-1")
    with reporter.progress("rollout groups", 4) as outer:
        with reporter.progress("eval", 2) as inner:
            inner()
            outer(n=2)
            assert len(reporter._bars.tasks) == 2
        assert len(reporter._bars.tasks) == 1
    assert reporter._bars is None
    with reporter.progress("again", 1) as advance:  # a fresh display after the last one closed
        advance()
    reporter.close()


def test_progress_in_a_job_log_is_a_line_a_minute_and_nothing_for_short_work(capsys: Any) -> None:
    from launch.report import LogProgress

    now = [0.0]
    quick = LogProgress("eval", 3, lambda: now[0])
    for _ in range(3):
        now[0] += 10.0
        quick()
    assert capsys.readouterr().out == ""  # 30 s of work: nothing
    now[0] = 0.0
    slow = LogProgress("curation profile", 96, lambda: now[0])
    for seconds in (30.0, 61.0, 100.0, 125.0):
        now[0] = seconds
        slow(n=24)
    assert capsys.readouterr().out.splitlines() == [
        "curation profile: 48/96 after 1m01s",
        "curation profile: 96/96 after 2m05s",  # the end, once a line was printed
    ]


def test_reporter_prints_a_row_per_phase_and_writes_trajectories(tmp_path: Any, capsys: Any) -> None:
    from launch.report import Reporter
    from specs.config import load_run_config

    class Tok:
        def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
            return " ".join(map(str, ids))

    cfg = load_run_config(None, [f"output_dir={tmp_path}", "wandb.mode=disabled"])
    reporter = Reporter(cfg, "run-1")
    with reporter.progress("rollout", 2) as advance:
        advance()
        advance(n=1)
    reporter.log("train", 3, {"success": 0.5, "loss": 0.25})
    path = reporter.write_trajectories("step_0003", [traj("a", 1.0)], Tok())
    reporter.close()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["phase", "step", "success"]
    assert lines[1].split()[:3] == ["train", "3", "0.50"] and "0.2500" in lines[1]
    assert json.loads(open(reporter.metrics_path).read()) == {
        "phase": "train",
        "step": 3,
        "success": 0.5,
        "loss": 0.25,
    }
    record = json.loads(open(path).read())
    assert record["text"] == "1 2 3 4" and record["trainable"] == [0, 0, 1, 1]
    assert record["score"]["success"] is True and record["score"]["task"] == 1.0


def test_each_rendering_segment_becomes_its_own_sample() -> None:
    t = traj("a", 1.0)
    t.token_ids, t.trainable, t.logprobs = (
        [1, 2, 3, 1, 2, 3, 4],
        [0, 1, 0, 0, 1, 0, 1],
        [0, -1, 0, 0, -2, 0, -3],
    )
    t.segment_starts = [0, 3]
    first, second = demonstration_samples([t])
    assert (first.token_ids, first.trainable, first.logprobs) == ([1, 2, 3], [0, 1, 0], [0, -1, 0])
    assert (second.token_ids, second.trainable, second.logprobs) == (
        [1, 2, 3, 4],
        [0, 1, 0, 1],
        [0, -2, 0, -3],
    )


def two_turns(group: str, adoption: AdoptionScore, calls: tuple[tuple[bool, bool | None], ...]) -> Trajectory:
    """prompt(2) turn1(2) tool(1) turn2(2): tokens 10..16; calls as (ok, read_only) at turns 1..."""
    return Trajectory(
        task_id=group,
        group_id=group,
        token_ids=[10, 11, 12, 13, 14, 15, 16],
        trainable=[0, 0, 1, 1, 0, 1, 1],
        logprobs=[0.0, 0.0, -0.1, -0.2, 0.0, -0.3, -0.4],
        versions=[0, 0],
        messages=[],
        tool_calls=[
            ToolCallRecord(
                turn=i + 1,
                name="s__t",
                arguments={"n": i},
                ok=ok,
                error_kind=None if ok else "tool_error",
                latency_s=0.0,
                output_bytes=1,
                read_only=read_only,
            )
            for i, (ok, read_only) in enumerate(calls)
        ],
        num_turns=2,
        score=score(adoption.shaped_return > 0, adoption=adoption),
    )


def test_adoption_samples_are_per_step_with_z_over_t_and_the_bonus_after_normalisation() -> None:
    """Two 2-step trajectories, T_max 4: R = +1 - 0.05 * 2/4 = 0.975 and -1 - 0.025 = -1.025;
    z = +-1/sqrt(2) = +-0.70711, per step z / 2 = +-0.35355; the winner's first call succeeded and
    writes (bonus 0.1 at step 1, as the Evaluator scores it), the loser's none."""
    won = AdoptionScore(shaped_return=0.975, steps=2, step_bonus=(0.1, 0.0))
    lost = AdoptionScore(shaped_return=-1.025, steps=2, step_bonus=(0.0, 0.0))
    group = [two_turns("g", won, ((True, False), (True, True))), two_turns("g", lost, ((False, None),))]
    samples = adoption_samples([group])
    assert [round(s.advantage, 5) for s in samples] == [0.45355, 0.35355, -0.35355, -0.35355]
    first, second = samples[0], samples[1]
    assert (first.token_ids, first.trainable, first.logprobs) == (
        [10, 11, 12, 13],
        [0, 0, 1, 1],
        [0.0, 0.0, -0.1, -0.2],
    )
    assert second.token_ids == [10, 11, 12, 13, 14, 15, 16] and second.trainable == [0, 0, 0, 0, 0, 1, 1]
    assert second.logprobs[-2:] == [-0.3, -0.4] and sum(second.logprobs[:5]) == 0.0


def test_packed_adoption_samples_carry_each_steps_tokens_and_advantage_in_one_row() -> None:
    won = AdoptionScore(shaped_return=0.975, steps=2, step_bonus=(0.1, 0.0))
    lost = AdoptionScore(shaped_return=-1.025, steps=2, step_bonus=(0.0, 0.0))
    group = [two_turns("g", won, ((True, False), (True, True))), two_turns("g", lost, ((False, None),))]
    packed = adoption_samples([group], pack=True)
    assert len(packed) == 2  # one row per trajectory (one rendering segment each)
    row = packed[0]
    assert row.token_ids == [10, 11, 12, 13, 14, 15, 16] and row.trainable == [0, 0, 1, 1, 0, 1, 1]
    assert row.logprobs == [0.0, 0.0, -0.1, -0.2, 0.0, -0.3, -0.4]
    assert [round(a, 5) for a in row.token_advantages] == [0, 0, 0.45355, 0.45355, 0, 0.35355, 0.35355]
    assert row.sequences == [0, 0, 0, 0, 0, 1, 1]  # each step a sequence of its own
    # the same trainable tokens with the same advantages as the per-step samples
    per_step = adoption_samples([group])

    def tokens(samples: list[Any]) -> list[tuple[int, int, float, float]]:
        return sorted(
            (i, s.token_ids[i], s.logprobs[i], round(s.token_advantages[i] if s.token_advantages else s.advantage, 9))
            for s in samples for i in range(len(s.token_ids)) if s.trainable[i]
        )  # fmt: skip

    assert tokens(packed[:1]) == tokens(per_step[:2]) and tokens(packed[1:]) == tokens(per_step[2:])


def test_a_packed_row_leaves_a_step_of_advantage_zero_untrainable() -> None:
    even = AdoptionScore(shaped_return=0.5, steps=2, step_bonus=(0.1, 0.0))
    group = [two_turns("g", even, ((True, False),)), two_turns("g", even, ((True, False),))]
    (row, _) = adoption_samples([group], pack=True)  # equal returns: only the bonus of step 1 is left
    assert row.token_ids == [10, 11, 12, 13] and row.trainable == [0, 0, 1, 1]
    assert row.token_advantages == [0.0, 0.0, 0.1, 0.1]


def test_the_accuracy_filter_leaves_out_the_all_fail_groups_of_adoption_returns() -> None:
    """All-fail: returns -1.025 (2 steps) and -1.05 (4 steps, T_max 4) differ only by the length
    tie-breaker, which the z-score would turn into advantages of +-0.7/T toward the shorter one."""
    won = AdoptionScore(shaped_return=0.975, steps=2, step_bonus=(0.0, 0.0))
    short = AdoptionScore(shaped_return=-1.025, steps=2, step_bonus=(0.0, 0.0))
    long = AdoptionScore(shaped_return=-1.05, steps=2, step_bonus=(0.0, 0.0))
    mixed = [two_turns("m", won, ((True, False),)), two_turns("m", short, ((True, False),))]
    failed = [two_turns("f", short, ((True, False),)), two_turns("f", long, ((True, False),))]
    unfiltered = adoption_samples([mixed, failed])
    assert len(unfiltered) == 8  # 2 steps x 4 trajectories: the all-fail group trains too
    kept = adoption_samples([mixed, failed], band=(0.05, 0.95))
    assert len(kept) == 4 and kept == adoption_samples([mixed])
    assert load_run_config(None, ["algorithm.returns=adoption"]).algorithm.band == (0.05, 0.95)
    assert load_run_config(None, []).algorithm.band is None


def scored(group: str, reward: float, **families: float) -> Trajectory:
    t = traj(group, reward)
    t.score = score(reward >= 1.0, **families)
    return t


def test_adoption_samples_refuse_a_trajectory_without_an_adoption_score() -> None:
    with pytest.raises(ValueError, match=r"trajectory of g has no adoption score \(Score.adoption is None\)"):
        adoption_samples([[traj("g", 1.0), traj("g", 0.0)]])


def tool_groups() -> list[list[Trajectory]]:
    """Three groups with outcome rewards and tool rewards (``Score.tool``, R_tool)."""
    return [
        # outcome [0, 1, 0, 0] (success rate 1/4); tool [7, 3, 3, 3]: mean 4, deviations [3, -1, -1, -1],
        # sample var (9 + 1 + 1 + 1)/3 = 4, std 2 -> A^T = [1.5, -0.5, -0.5, -0.5]
        # (the outcome would give [-0.5, 1.5, -0.5, -0.5])
        [scored("a", r, tool=x) for r, x in [(0.0, 7.0), (1.0, 3.0), (0.0, 3.0), (0.0, 3.0)]],
        # all fail (rate 0); tool [5, 1]: mean 3, deviations ±2, var 8/1, std 2√2 -> A^T = ±1/√2
        [scored("b", 0.0, tool=5.0), scored("b", 0.0, tool=1.0)],
        # outcome [1, 0] (rate 1/2) but tool [4, 4]: A^T = [0, 0], no action signal
        [scored("c", 1.0, tool=4.0), scored("c", 0.0, tool=4.0)],
    ]


def test_with_the_tool_signal_the_action_advantage_is_the_group_normalised_tool_reward() -> None:
    samples = rl_samples(tool_groups(), action_signal="tool")  # c left out: zero advantage
    assert [s.advantage for s in samples] == pytest.approx([1.5, -0.5, -0.5, -0.5, 0.7071, -0.7071], abs=1e-4)
    # without the key: the outcome, as before (a: [-0.5, 1.5, -0.5, -0.5], b: 0 left out, c: ±1/√2)
    outcome = rl_samples(tool_groups())
    assert [s.advantage for s in outcome] == pytest.approx([-0.5, 1.5, -0.5, -0.5, 0.7071, -0.7071], abs=1e-4)
    # Dr. GRPO (centred only): a: [3, -1, -1, -1], b: [2, -2]
    centred = rl_samples(tool_groups(), action_signal="tool", std_normalize=False)
    assert [s.advantage for s in centred] == pytest.approx([3.0, -1.0, -1.0, -1.0, 2.0, -2.0], abs=1e-9)


def test_with_the_tool_signal_the_band_still_filters_on_task_success() -> None:
    # band (0, 1): b (rate 0) is dropped although its tool rewards differ; c (rate 1/2) is kept but
    # has zero advantage, so it appears only with keep_zero
    banded = rl_samples(tool_groups(), action_signal="tool", band=(0.0, 1.0))
    assert [s.advantage for s in banded] == pytest.approx([1.5, -0.5, -0.5, -0.5], abs=1e-4)
    kept = rl_samples(tool_groups(), action_signal="tool", band=(0.0, 1.0), keep_zero=True)
    assert [s.advantage for s in kept] == pytest.approx([1.5, -0.5, -0.5, -0.5, 0.0, 0.0], abs=1e-4)


def test_the_tool_and_reasoning_families_give_each_stream_its_own_advantage() -> None:
    # c: A^T = [0, 0] (tool [4, 4]); reasoning [0.6, 0.2]: mean 0.4, deviations ±0.2,
    # var 0.08/1, std 0.2828 -> A^R = ±1/√2: kept for the reasoning stream
    group = [scored("c", 1.0, tool=4.0, reasoning=0.6), scored("c", 0.0, tool=4.0, reasoning=0.2)]
    samples = rl_samples([group], action_signal="tool", reasoning=True)
    assert [s.advantage for s in samples] == [0.0, 0.0]
    assert [s.reasoning_advantage for s in samples] == pytest.approx([0.7071, -0.7071], abs=1e-4)


def test_a_family_the_evaluator_did_not_compute_is_refused_naming_task_and_family() -> None:
    # refused even when its group would be dropped by the band (b: all fail): None is not 0.0
    groups = [[scored("a", 1.0, tool=1.0), scored("a", 0.0, tool=0.0)], [traj("b", 0.0), traj("b", 0.0)]]
    with pytest.raises(ValueError, match=r"trajectory of b has no tool reward \(Score.tool is None\)"):
        rl_samples(groups, action_signal="tool", band=(0.0, 1.0))
    with pytest.raises(ValueError, match=r"trajectory of a has no reasoning reward"):
        rl_samples([[scored("a", 1.0), scored("a", 0.0)]], reasoning=True)


def test_no_demonstration_is_explained_by_what_became_of_the_expert_episodes() -> None:
    lost = traj("a", None, status="infra_failed")
    lost.error = "EnvError: bwrap backend: the `bwrap` executable is not on PATH"
    why = why_no_demonstration([lost, traj("b", None, status="infra_failed")], asked=4)
    assert why.startswith("2 of 4 expert episodes came back; 2 infra_failed; first: a: EnvError: bwrap")
    unsolved = why_no_demonstration([traj("a", 0.0), traj("b", 0.0)], asked=2)
    assert "2 of 2" in unsolved and "2 ran to the end and none succeeded" in unsolved
    assert why_no_demonstration([], asked=3) == "0 of 3 expert episodes came back"
