"""``launch/bench/pipeline.py`` and its simulated engine: the harness's pure helpers pinned, the
engine's batching, counters, kill and restart, the scripted episode it writes, and the ``--quick``
run in-process (with and without faults) ending with its summary line, no partial group trained
and nothing left behind. No wall-clock assertions: the machine is shared and noisy."""

from __future__ import annotations

import math
import os
import re
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.server.mcpserver.exceptions import ToolError
from transformers import AutoTokenizer

from launch.bench import pipeline as bench
from launch.bench.faults import CpuSampler
from launch.bench.pipeline_modes import Mode, episodes_needed, modes, steady_window
from launch.bench.pipeline_report import Result, speedup, summary_line
from launch.bench.sim_generator import GeneratorDown, LatencyToolScript, SimulatedGenerator
from policies.react import build_messages
from policies.throughput import Limit
from policies.tokens import ChatRecorder
from policies.tool_calls import parse_tool_call
from policies.types import Generation, SamplingConfig, ToolCall, ToolSpec
from specs.servers import parse_server_registry
from tests.servers import latency_server

SUMMARY = re.compile(r"^pipeline: E_min=(\S+) decoupled_over_coupled=(\S+) decoupled_over_control=(\S+)")


@pytest.fixture(scope="module")
def tokenizer(model_dir: Path) -> Any:
    return AutoTokenizer.from_pretrained(model_dir)


# -- pure helpers ---------------------------------------------------------------------------------


def test_the_modes_follow_the_worker_counts_and_the_control_holds_the_decoupled_envs() -> None:
    assert modes(2) == [
        Mode("coupled", 2, 2, 4),
        Mode("decoupled-2x", 2, 4, 6),
        Mode("decoupled-5x", 2, 10, 12),
    ]
    assert modes(1, control_live=5)[-1] == Mode("control", 5, 5, 5)
    assert Mode("control", 5, 5, 4).concurrency == 4 and Mode("x", 1, 5, 6).concurrency == 5


def test_episodes_cover_a_ramp_the_window_and_one_generation_in_flight() -> None:
    # C = 5, 2 cycles: (2 + 2) * 5 = 20 episodes, already whole groups of 2
    assert episodes_needed(Mode("d", 1, 5, 6), cycles=2, group_size=2) == 20
    # C = 1: 4 episodes; C = 3, groups of 4: 12
    assert episodes_needed(Mode("c", 1, 1, 2), cycles=2, group_size=2) == 4
    assert episodes_needed(Mode("c", 3, 3, 3), cycles=2, group_size=4) == 12
    # measured from the start: one generation (C = 5 -> 6 in groups of 2), at least 2
    assert episodes_needed(Mode("d", 1, 5, 6), cycles=0, group_size=2) == 6
    assert episodes_needed(Mode("c", 1, 1, 2), cycles=0, group_size=1) == 2


def test_the_steady_window_spans_whole_cycles_after_the_first_generation() -> None:
    # C = 2, 2 cycles: from completion index 1 (t=4) to index 1 + 4 = 5 (t=12)
    done = [3.0, 4.0, 7.0, 8.0, 11.0, 12.0, 15.0, 16.0]
    assert steady_window(done[::-1], concurrency=2, cycles=2, started=0.0, ended=20.0) == (4.0, 12.0, True)
    # too few completions, or cycles 0: the whole run, its last evaluations and releases included
    assert steady_window(done[:5], concurrency=2, cycles=2, started=0.5, ended=20.0) == (0.5, 20.0, False)
    assert steady_window(done, concurrency=2, cycles=0, started=0.5, ended=20.0) == (0.5, 20.0, False)
    assert steady_window([], concurrency=1, cycles=2, started=1.0, ended=9.0) == (1.0, 9.0, False)
    with pytest.raises(ValueError, match="concurrency >= 1"):
        steady_window(done, concurrency=0, cycles=2, started=0.0, ended=1.0)


def result(name: str, latency: float, achieved: float, limit: float) -> Result:
    bounds = dict.fromkeys(("engine", "run"), limit)
    lim = Limit(
        bounds=bounds,
        binding="run",
        tokens_per_s=limit,
        episodes_per_s=1,
        run_s=1,
        env_s=1,
        engine_share=1,
    )
    return Result(
        Mode(name, 1, 1, 2), latency, 4, achieved, lim, util=0.5, max_live=2, steady=True, window_s=10.0
    )


def test_the_summary_takes_the_lowest_e_and_geometric_means_of_the_speedups() -> None:
    results = [
        result("coupled", 0.1, 20.0, 20.0),  # E 1.0
        result("decoupled-5x", 0.1, 80.0, 100.0),  # E 0.8: the lowest
        result("control", 0.1, 40.0, 40.0),
        result("coupled", 5.0, 10.0, 10.0),
        result("decoupled-5x", 5.0, 90.0, 90.0),
        result("control", 5.0, 90.0, 90.0),
    ]
    # over coupled: 80/20 = 4 and 90/10 = 9 -> sqrt(36) = 6; over control: 2 and 1 -> sqrt(2)
    assert speedup(results, "coupled") == pytest.approx(6.0)
    assert summary_line(results, faults=0.0) == (
        "pipeline: E_min=0.800 decoupled_over_coupled=6.00 decoupled_over_control=1.41"
    )
    results[0].partial_groups, results[1].leftovers = 0, 0
    results[0].useful_tokens, results[0].generated_tokens = 30, 40
    assert summary_line(results, faults=0.1).endswith(
        " faults=0.1 useful_over_generated=0.750 partial_groups=0 leftovers=0"
    )
    assert math.isnan(speedup([result("decoupled-5x", 1, 0.0, 1), result("coupled", 1, 5.0, 1)], "coupled"))


# -- the simulated engine ---------------------------------------------------------------------------


def tokens(n: int) -> Any:
    return lambda prompt: list(range(10, 10 + n))


@pytest.mark.anyio
async def test_one_slot_serialises_requests_one_token_per_step() -> None:
    lengths = [3, 5]
    with anyio.fail_after(10):
        async with SimulatedGenerator.running(
            lambda prompt: list(range(lengths[prompt[0]])), step_t0_s=0.001, step_t1_s=0.002, max_num_seqs=1
        ) as sim:
            async with anyio.create_task_group() as tg:
                for i in (0, 1):
                    tg.start_soon(sim.generate, [i], SamplingConfig(max_tokens=10))
    timeline = sim.timeline()
    assert [batch for _, batch in timeline] == [1] * 8  # 3 + 5 tokens, one sequence per step
    steps = [b - a for (a, _), (b, _) in zip(timeline, timeline[1:], strict=False)]
    assert steps == pytest.approx([0.003] * 7, abs=1e-9)  # back to back, t(1) = 0.001 + 0.002 each
    stats = sim.stats()
    assert (stats.requests, stats.prompt_tokens, stats.generated_tokens) == (2, 2, 8)
    assert stats.busy_s == pytest.approx(8 * 0.003)


@pytest.mark.anyio
async def test_a_batch_advances_every_sequence_and_a_step_lasts_t_of_its_batch() -> None:
    with anyio.fail_after(10):
        async with SimulatedGenerator.running(
            tokens(4), step_t0_s=0.002, step_t1_s=0.001, max_num_seqs=8
        ) as sim:
            async with anyio.create_task_group() as tg:
                for _ in range(3):
                    tg.start_soon(sim.generate, [1], SamplingConfig(max_tokens=10))
    timeline = sim.timeline()
    assert sum(batch for _, batch in timeline) == 12 == sim.generated_tokens
    assert max(batch for _, batch in timeline) >= 2  # they shared steps
    assert sim.steps < 12
    # the virtual clock: each step ends t(b) after the previous one while the engine is busy
    for (before, _), (after, batch) in zip(timeline, timeline[1:], strict=False):
        assert after - before == pytest.approx(0.002 + 0.001 * batch, abs=1e-9)
    first, last = timeline[0][0], timeline[-1][0]
    assert sim.tokens_between(first, last) == 12 - timeline[0][1]  # (first, last]: the first step is out
    # saturated: B / t(B) = 8 / (0.002 + 0.008) = 800 tok/s; all 12 tokens fall in (first - 1, last]
    assert sim.utilisation(first - 1, last) == pytest.approx(12 / (last - first + 1) / 800)


@pytest.mark.anyio
async def test_a_turn_is_cut_at_max_tokens() -> None:
    with anyio.fail_after(10):
        async with SimulatedGenerator.running(
            tokens(6), step_t0_s=0.001, step_t1_s=0.0, max_num_seqs=1
        ) as sim:
            cut = await sim.generate([1], SamplingConfig(max_tokens=4))
            whole = await sim.generate([1], SamplingConfig(max_tokens=6))
    assert (cut.token_ids, cut.finish_reason) == ([10, 11, 12, 13], "length")
    assert (len(whole.token_ids), whole.finish_reason, whole.logprobs) == (6, "stop", [0.0] * 6)


@pytest.mark.anyio
async def test_a_killed_engine_fails_every_request_until_it_restarts() -> None:
    failed: list[GeneratorDown] = []

    async def one(sim: SimulatedGenerator) -> None:
        try:
            await sim.generate([1], SamplingConfig(max_tokens=1000))
        except GeneratorDown as e:
            failed.append(e)

    with anyio.fail_after(10):
        async with SimulatedGenerator.running(
            tokens(500), step_t0_s=0.01, step_t1_s=0.0, max_num_seqs=1
        ) as sim:
            async with anyio.create_task_group() as tg:
                tg.start_soon(one, sim)  # decoding
                tg.start_soon(one, sim)  # queued behind it
                await anyio.wait_all_tasks_blocked()
                assert sim.kill("injected") == 2
            assert len(failed) == 2 and "injected" in str(failed[0]) and not sim.alive
            with pytest.raises(GeneratorDown, match="down: injected"):
                await sim.generate([1], SamplingConfig(max_tokens=1000))
            sim.restart()
            await sim.update_weights(3, "/unused")
            answer = await sim.generate([1], SamplingConfig(max_tokens=1000))
    assert len(answer.token_ids) == 500 and answer.version == 3
    assert sim.killed_tokens < sim.generated_tokens


@pytest.mark.anyio
async def test_a_cancelled_request_leaves_the_engine_as_vllm_aborts_it() -> None:
    with anyio.fail_after(10):
        async with SimulatedGenerator.running(
            tokens(1000), step_t0_s=0.005, step_t1_s=0.0, max_num_seqs=1
        ) as sim:
            async with anyio.create_task_group() as tg:
                tg.start_soon(sim.generate, [1], SamplingConfig(max_tokens=1000))
                await anyio.wait_all_tasks_blocked()
                tg.cancel_scope.cancel()
            emitted = sim.generated_tokens
            answer = await sim.generate([1], SamplingConfig(max_tokens=2))
    # had the first request stayed, the second (one slot, FIFO) would come after its 1000 tokens
    assert len(answer.token_ids) == 2 and sim.generated_tokens == emitted + 2


def test_a_bad_engine_is_refused() -> None:
    with pytest.raises(ValueError, match="max_num_seqs must be >= 1"):
        SimulatedGenerator(tokens(1), step_t0_s=0.01, step_t1_s=0.0, max_num_seqs=0)
    with pytest.raises(ValueError, match="positive sum"):
        SimulatedGenerator(tokens(1), step_t0_s=0.0, step_t1_s=0.0, max_num_seqs=1)


def test_cpu_figures_of_a_window() -> None:
    sampler = CpuSampler()
    # 10 s: this process 1 CPU s, its tree 5 CPU s, the whole machine 15 CPU s busy
    sampler.samples = [(0.0, 0.0, 0.0, 0.0), (10.0, 1.0, 5.0, 15.0)]
    cpu = sampler.window(0.0, 10.0, turns=10, turns_per_episode=2)
    # 1 s / 10 turns; 5 s / 5 episodes; the others kept (15 - 5) / 10 = 1 core busy
    assert cpu == pytest.approx({"turn": 0.1, "episode": 1.0, "free": max(0.1, (os.cpu_count() or 1) - 1.0)})
    assert sampler.at(5.0) == pytest.approx((0.5, 2.5, 7.5))  # interpolated


@pytest.mark.anyio
async def test_the_latency_server_sleeps_as_asked_and_refuses_a_negative_time() -> None:
    result = await latency_server.server.call_tool("sleep", {"seconds": 0})
    assert [part.text for part in result.content] == ["slept 0 s"] and not result.is_error
    # the SDK wraps the tool's ValueError (a client gets an isError result)
    with pytest.raises(ToolError, match="sleep"):
        await latency_server.server.call_tool("sleep", {"seconds": -1})
    launch = parse_server_registry(latency_server.REGISTRY, "<test>").launch("latency")
    assert launch.command == sys.executable and launch.args[-1].endswith("latency_server.py")


# -- the scripted episode -----------------------------------------------------------------------------


def test_the_script_calls_the_latency_tool_then_answers_in_turns_of_exactly_n_tokens(tokenizer: Any) -> None:
    script = LatencyToolScript(
        tokenizer, tool_name="latency__sleep", seconds=0.1, turns=3, tokens_per_turn=48
    )
    recorder = ChatRecorder(tokenizer)
    tool = ToolSpec(name="latency__sleep", server="latency", tool="sleep")
    prompt = recorder.start(build_messages("Wait, then say done.", [tool], None))
    texts = []
    for turn in range(3):
        assert script.turn_index(prompt) == turn
        ids = script(prompt)
        assert len(ids) == 48 and ids[-1] == tokenizer.eos_token_id
        texts.append(
            recorder.add_model_turn(
                Generation(token_ids=ids, logprobs=[0.0] * 48, version=0, finish_reason="stop")
            )
        )
        if turn < 2:
            prompt = recorder.add_messages(
                [{"role": "tool", "content": "<tool_response>\nslept 0.1 s\n</tool_response>"}]
            )
    assert [parse_tool_call(t) for t in texts[:2]] == [
        ToolCall(name="latency__sleep", arguments={"seconds": 0.1})
    ] * 2
    assert parse_tool_call(texts[2]) is None and texts[2].endswith("The answer is done.")
    with pytest.raises(ValueError, match="tokens_per_turn=20 is too small for the tool call turn"):
        LatencyToolScript(tokenizer, tool_name="latency__sleep", seconds=0.1, turns=2, tokens_per_turn=20)


# -- the harness, quick ---------------------------------------------------------------------------------


def summary_of(output: str) -> tuple[float, float, float]:
    (line,) = [line for line in output.splitlines() if line.startswith("pipeline:")]
    found = SUMMARY.match(line)
    assert found, line
    return float(found.group(1)), float(found.group(2)), float(found.group(3))


def test_the_quick_run_prints_its_summary_and_leaves_nothing_behind(
    model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = bench.main(["--quick"])
    e_min, over_coupled, over_control = summary_of(capsys.readouterr().out)
    assert [r.mode.name for r in results] == ["coupled", "decoupled-2x", "decoupled-5x", "control"]
    assert 0 < e_min <= 1.2 and over_coupled > 0 and over_control > 0
    for r in results:
        assert 0 < r.efficiency <= 1.2, (r.mode, r.achieved, r.limit)
        assert r.limit.binding in r.limit.bounds and r.leftovers == 0 and r.partial_groups == 0
        assert r.lost == {} and 0 < r.util <= 1.0


def test_a_quick_run_with_faults_trains_no_partial_group_and_leaves_nothing_behind(
    model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = bench.main(["--quick", "--faults", "0.5"])
    out = capsys.readouterr().out
    (line,) = [line for line in out.splitlines() if line.startswith("pipeline:")]
    assert line.endswith("partial_groups=0 leftovers=0"), line
    assert " faults=0.5 useful_over_generated=" in line
    assert sum(sum(r.faults.values()) for r in results) > 0  # faults were injected
    assert all(r.partial_groups == 0 and r.leftovers == 0 for r in results)
    assert sum(r.useful_tokens for r in results) <= sum(r.generated_tokens for r in results)


def test_bad_arguments_are_refused_naming_the_flag() -> None:
    with pytest.raises(SystemExit):
        bench.parse_args(["--faults", "1.5"])
    with pytest.raises(SystemExit):
        bench.parse_args(["--latencies", "0.1,x"])
    assert bench.parse_args(["--quick", "--latencies", "0.5,2"]).settings.latencies == (0.5, 2.0)
