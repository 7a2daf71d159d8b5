"""Episode metrics and their standard errors, pinned on hand-built trajectories."""

from __future__ import annotations

import math

import msgspec
import pytest

from actors.generator import GeneratorStats, engine_use
from policies.metrics import (
    PER_EPISODE,
    episode_metrics,
    metrics_with_stderr,
    turn_input_tokens,
)
from policies.stats import mean_and_stderr, ratio_and_stderr
from specs.trajectory import Score, ToolCallRecord, Trajectory, Verdict


def call(turn: int, kind: str | None = None) -> ToolCallRecord:
    return ToolCallRecord(
        turn=turn,
        name="calculator__add" if kind != "unknown_tool" else "made_up",
        arguments={},
        ok=kind is None,
        error_kind=kind,
        latency_s=0.0,
        output_bytes=1,
    )


def episode(
    task: str,
    reward: float | None,
    *,
    calls: tuple[ToolCallRecord, ...] = (),
    turns: int = 1,
    final: str | None = "answer",
    trainable: tuple[int, ...] = (0, 1),
    reasoning: tuple[int, ...] = (),
    segments: tuple[int, ...] = (0,),
    status: str = "ok",
) -> Trajectory:
    return Trajectory(
        task_id=task,
        group_id=task,
        token_ids=list(range(len(trainable))),
        trainable=list(trainable),
        logprobs=[0.0] * len(trainable),
        versions=[0] * turns,
        messages=[],
        tool_calls=list(calls),
        segment_starts=list(segments),
        reasoning=list(reasoning),
        final_answer=final,
        num_turns=turns,
        truncated=final is None,
        status=status,  # type: ignore[arg-type]
        score=None if reward is None else Score.of((Verdict(func="raw", op="=", passed=reward >= 1.0),)),
    )


def batch() -> list[Trajectory]:
    """Four tasks, one episode each, and one lost episode (never counted)."""
    return [
        # a: called a tool (ok), then answered correctly. Turns start at 3 and 7: input 3 + 7 = 10.
        episode(
            "a",
            1.0,
            calls=(call(1),),
            turns=2,
            trainable=(0, 0, 0, 1, 1, 0, 0, 1, 1),
            reasoning=(0, 0, 0, 1, 0, 0, 0, 0, 0),
        ),
        # b: a made-up tool, then a good call, then a wrong answer: a false success. Input 2 + 4 + 6.
        episode(
            "b",
            0.0,
            calls=(call(1, "unknown_tool"), call(2)),
            turns=3,
            trainable=(0, 0, 1, 0, 1, 0, 1),
        ),
        # c: two made-up tools, cut by the turn limit (no final answer): not a false success. Input 1 + 3.
        episode(
            "c",
            0.0,
            calls=(call(1, "unknown_tool"), call(2, "unknown_tool")),
            turns=2,
            final=None,
            trainable=(0, 1, 0, 1),
        ),
        # d: answered directly and correctly. Input 2.
        episode("d", 1.0, turns=1, trainable=(0, 0, 1), reasoning=(0, 0, 1)),
        episode("e", None, status="infra_failed", trainable=()),
    ]


def test_every_metric_of_a_hand_built_batch_is_pinned() -> None:
    m = episode_metrics(batch())
    assert m == pytest.approx(
        {
            "episodes": 4.0,
            "tasks": 4.0,
            "success": 0.5,  # a, d
            "reward": 0.5,
            "tool_calls": 1.25,  # (1 + 2 + 2 + 0) / 4
            "tool_adoption": 0.5,  # a, b made a call that ran
            "valid_call": 0.25,  # only a's first call is a real tool
            "turns": 2.0,  # (2 + 3 + 2 + 1) / 4
            "gen_tokens": 2.5,  # (4 + 3 + 2 + 1) / 4
            "reasoning_tokens": 0.5,  # (1 + 0 + 0 + 1) / 4
            "false_success": 0.25,  # b: answered, reward 0; c never answered
            "hallucinated_tools": 0.75,  # (0 + 1 + 2 + 0) / 4
            "unparsed_calls": 0.0,  # no call failed to parse (see the test below)
            "truncated": 0.25,  # c: cut before it answered
            "input_tokens": 7.0,  # (10 + 12 + 4 + 2) / 4
            "tool_step_share": 0.625,  # tool-calling turns (1 + 2 + 2 + 0) / turns (2 + 3 + 2 + 1)
            "task_adoption": 0.5,  # one episode per task: equals tool_adoption
        }
    )


def test_calls_that_do_not_parse_are_counted_apart_from_made_up_tools() -> None:
    garbled = episode(
        "g", 0.0, calls=(call(1, "parse_error"), call(2, "parse_error"), call(3, "unknown_tool")), turns=3
    )
    m = episode_metrics([garbled, episode("d", 1.0)])
    assert m["unparsed_calls"] == 1.0 and m["hallucinated_tools"] == 0.5  # (2 + 0) / 2, (1 + 0) / 2
    assert m["valid_call"] == 0.0  # neither began with a call that ran


def test_standard_errors_of_the_batch_are_pinned() -> None:
    row = metrics_with_stderr(batch())["all"]
    # success [1, 0, 0, 1]: mean 0.5, s^2 = 4 * 0.25 / 3 = 1/3, SE = sqrt(1/3 / 4) = sqrt(1/12)
    assert row["success"] == pytest.approx((0.5, math.sqrt(1 / 12)))
    # hallucinated [0, 1, 2, 0]: mean 0.75, squared deviations 0.5625 + 0.0625 + 1.5625 + 0.5625
    # = 2.75, s^2 = 2.75 / 3, SE = sqrt(2.75 / 12) = 0.478714
    assert row["hallucinated_tools"] == pytest.approx((0.75, 0.478714), abs=1e-6)
    # tool steps y = [1, 2, 2, 0] over turns n = [2, 3, 2, 1]: R = 5/8; y - R n = -0.25, 0.125,
    # 0.75, -0.625, squares sum 1.03125; / (4 * 3) = 0.0859375; sqrt = 0.293151; / mean n (2)
    assert row["tool_step_share"] == pytest.approx((0.625, 0.1465755), abs=1e-6)
    assert row["episodes"] == (4.0, 0.0) and row["tasks"] == (4.0, 0.0)


def test_the_means_of_metrics_with_stderr_are_episode_metrics() -> None:
    means = {k: mean for k, (mean, _) in metrics_with_stderr(batch())["all"].items()}
    assert means == episode_metrics(batch())
    assert set(PER_EPISODE) < set(means)


def test_repeated_samples_of_a_task_are_one_unit_of_the_standard_error() -> None:
    # Task x: both samples succeed (one adopts a tool); task y: both fail, no tool.
    ts = [
        episode("x", 1.0, calls=(call(1),), turns=2),
        episode("x", 1.0),
        episode("y", 0.0),
        episode("y", 0.0),
    ]
    row = metrics_with_stderr(ts)["all"]
    # Clustered: y = [2, 0], n = [2, 2], R = 0.5; deviations 1, -1 -> sqrt(2 / 2) / 2 = 0.5.
    # (Treating the 4 episodes as independent would give sqrt(1/12) = 0.289: too confident.)
    assert row["success"] == pytest.approx((0.5, 0.5))
    # Task level: x adopted, y not -> [1, 0]: mean 0.5, SE = sqrt(0.5 / 2) = 0.5;
    # per episode only 1 in 4 adopted.
    assert row["task_adoption"] == pytest.approx((0.5, 0.5))
    assert row["tool_adoption"][0] == 0.25
    assert row["tasks"] == (2.0, 0.0) and row["episodes"] == (4.0, 0.0)


def test_rows_per_domain_come_after_the_overall_row_sorted() -> None:
    rows = metrics_with_stderr(batch(), by={"a": "math", "b": "math", "c": "geo", "d": "geo"})
    assert list(rows) == ["all", "geo", "math"]
    # geo: c fails, d succeeds -> [0, 1]: mean 0.5, s^2 = 0.5, SE = sqrt(0.5 / 2) = 0.5
    assert rows["geo"]["success"] == pytest.approx((0.5, 0.5))
    # math: a succeeds, b fails; b is the false success
    assert rows["math"]["false_success"] == pytest.approx((0.5, 0.5))
    assert rows["math"]["episodes"] == (2.0, 0.0)


def test_a_task_without_a_domain_or_a_domain_named_all_is_refused() -> None:
    with pytest.raises(ValueError, match="task 'd' has no domain"):
        metrics_with_stderr(batch(), by={"a": "m", "b": "m", "c": "m"})
    with pytest.raises(ValueError, match="names the overall row"):
        metrics_with_stderr(batch(), by={"a": "all", "b": "m", "c": "m", "d": "m"})


def test_no_scored_episode_gives_only_a_zero_count() -> None:
    lost = [episode("e", None, status="infra_failed")]
    assert episode_metrics([]) == {"episodes": 0.0}
    assert episode_metrics(lost, prefix="eval/") == {"eval/episodes": 0.0}
    assert metrics_with_stderr(lost, by={"e": "x"}) == {"all": {"episodes": (0.0, 0.0)}}


def test_a_single_episode_has_zero_standard_error() -> None:
    row = metrics_with_stderr([episode("a", 1.0)])["all"]
    assert row["success"] == (1.0, 0.0) and row["task_adoption"] == (0.0, 0.0)


def test_input_tokens_restart_at_a_rendering_segment() -> None:
    # Turns start at 2, 7 and 11; a restart at 4 re-encoded the context: 2 - 0, 7 - 4, 11 - 4.
    t = episode("a", 1.0, turns=3, trainable=(0, 0, 1, 0, 0, 0, 0, 1, 1, 0, 0, 1), segments=(0, 4))
    assert turn_input_tokens(t) == [2, 3, 7]
    # Without the restart the same turns read 2, 7 and 11 tokens.
    t.segment_starts = [0]
    assert turn_input_tokens(t) == [2, 7, 11]
    assert turn_input_tokens(episode("a", 0.0, trainable=(0, 0, 0))) == []


def test_episode_metrics_count_success_adoption_and_first_turn_validity() -> None:
    metrics = episode_metrics(
        [
            episode("a", 1.0, calls=(call(1),), turns=2),  # valid call, succeeded
            episode("b", 0.0, calls=(call(1, "parse_error"), call(2)), turns=3),  # malformed, then good
            episode("c", 0.0, calls=(call(1, "tool_error"),), turns=2),  # well-formed, tool said no
            episode("d", 0.0),  # answered directly
            episode("e", None, status="infra_failed"),  # not scored: not counted
        ]
    )
    assert metrics["episodes"] == 4
    assert metrics["success"] == 0.25
    assert metrics["tool_adoption"] == 0.5
    assert metrics["valid_call"] == 0.5
    assert metrics["tool_calls"] == 1.0


def test_mean_and_stderr_use_the_sample_standard_deviation() -> None:
    # mean 5; squared deviations 9+1+1+1+0+0+4+16 = 32; s^2 = 32/7; SE = sqrt(32/7/8) = sqrt(4/7)
    assert mean_and_stderr([2, 4, 4, 4, 5, 5, 7, 9]) == pytest.approx((5.0, math.sqrt(4 / 7)))
    assert mean_and_stderr([3.0]) == (3.0, 0.0)
    assert mean_and_stderr([2.0, 2.0, 2.0]) == (2.0, 0.0)
    with pytest.raises(ValueError, match="no values"):
        mean_and_stderr([])


def test_a_ratio_over_clusters_of_one_is_the_plain_mean() -> None:
    values = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]
    assert ratio_and_stderr(values, [1.0] * 8) == pytest.approx(mean_and_stderr(values))
    assert ratio_and_stderr([0.0, 0.0], [0.0, 0.0]) == (0.0, 0.0)  # no turns at all
    assert ratio_and_stderr([3.0], [4.0]) == (0.75, 0.0)
    with pytest.raises(ValueError, match="2 numerators but 1 denominators"):
        ratio_and_stderr([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="no clusters"):
        ratio_and_stderr([], [])


def test_the_gateways_own_route_tool_is_no_tool_adoption() -> None:
    route = msgspec.structs.replace(call(1), name="route", server="mcprl", read_only=True)
    routed_only = episode("t", 0.0, calls=(route,))
    real = episode("u", 1.0, calls=(route, msgspec.structs.replace(call(2), server="calculator")))
    metrics = episode_metrics([routed_only, real])
    assert metrics["tool_adoption"] == 0.5 and metrics["task_adoption"] == 0.5


def test_engine_use_is_the_busy_share_of_the_wall_time_and_the_mean_open_requests_while_busy() -> None:
    def snapshot(busy_s: float, request_s: float) -> GeneratorStats:
        return GeneratorStats(
            requests=0, prompt_tokens=0, generated_tokens=0, busy_s=busy_s, weight_updates=0,
            weight_update_s=0.0, request_s=request_s,
        )  # fmt: skip

    # 10 s of wall time; busy 4 of them, with 6 requests open on average: 24 request-seconds
    assert engine_use(snapshot(1.0, 2.0), snapshot(5.0, 26.0), wall_s=10.0) == {
        "engine_busy": 0.4,
        "engine_open": 6.0,
    }
    assert engine_use(snapshot(1.0, 2.0), snapshot(1.0, 2.0), wall_s=10.0) == {
        "engine_busy": 0.0,
        "engine_open": 0.0,
    }  # idle: nothing to divide by


def on(server: str, turn: int) -> ToolCallRecord:
    return msgspec.structs.replace(call(turn), name=f"{server}__act", server=server)


def test_gui_actions_are_steps_on_the_gui_not_tool_adoption() -> None:
    """Paper 002's hybrid agent: a call on a GUI server (the browser) is a GUI step; only the other
    servers' calls are tool use (TIR = MCP steps / all steps)."""
    ts = [
        # x: three GUI turns, then one tool turn, then the answer (5 turns)
        episode(
            "x",
            1.0,
            calls=(on("browser", 1), on("browser", 2), on("browser", 3), on("inventory", 4)),
            turns=5,
        ),
        # y: GUI only, two turns, then the answer (3 turns)
        episode("y", 1.0, calls=(on("browser", 1), on("browser", 2)), turns=3),
    ]
    row = metrics_with_stderr(ts, gui_servers=["browser"])["all"]
    assert row["gui_step_share"][0] == pytest.approx(5 / 8)
    assert row["tool_step_share"][0] == pytest.approx(1 / 8)
    assert row["tool_adoption"][0] == 0.5 and row["task_adoption"][0] == 0.5
    reach = metrics_with_stderr(ts, gui_servers=["browser"], reachable={"x": True, "y": False})["all"]
    assert reach["reachable_adoption"] == (1.0, 0.0)  # x, the one tool-reachable task, adopted
    unreachable = metrics_with_stderr(ts, gui_servers=["browser"], reachable={"x": False, "y": False})
    assert "reachable_adoption" not in unreachable["all"]
    plain = metrics_with_stderr(ts)["all"]  # without G every call is tool use
    assert "gui_step_share" not in plain and plain["tool_step_share"][0] == pytest.approx(6 / 8)
    assert plain["tool_adoption"][0] == 1.0
