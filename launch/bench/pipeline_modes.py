"""The pipeline bench's scenarios: its settings, the compared modes and the steady window.

A ``Mode`` is one setting of the rollout pipeline's stages (a, r, L: acquire and run workers,
live-environment cap); ``modes`` lists the compared ones (``launch/bench/pipeline.py`` explains
them), ``episodes_needed`` sizes a run so its steady window fits, and ``steady_window`` finds that
window in the completion times. ``tasks`` are the synthetic latency-server tasks every mode runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specs.task import EvaluatorSpec, McpServerRef, TaskSpec
from tests.servers.latency_server import SERVER_NAME, TOOL


@dataclass(frozen=True)
class Settings:
    latencies: tuple[float, ...] = (0.1, 1.0, 5.0)
    turns: int = 2
    tokens_per_turn: int = 40
    step_t0_s: float = 0.020
    step_t1_s: float = 0.005
    max_num_seqs: int = 3
    workers: int = 1
    """n: acquire workers of every mode but the control."""
    group_size: int = 2
    cycles: int = 2
    """Whole cycles in the steady window; 0: measure the whole run from its start."""
    calibration_episodes: int = 3
    """Single episodes of the calibration; the first is a warm-up."""
    faults: float = 0.0
    restart_s: float = 0.5


QUICK = Settings(latencies=(0.1,), step_t0_s=0.004, step_t1_s=0.001, cycles=0, calibration_episodes=2)


@dataclass(frozen=True)
class Mode:
    name: str
    acquire: int
    run: int
    cap: int

    @property
    def concurrency(self) -> int:
        """C: episodes cycling at once in steady state (what one cycle completes)."""
        return min(self.run, self.cap)


def modes(workers: int, control_live: int | None = None) -> list[Mode]:
    """The compared settings; the control once the decoupled run's live envs are known."""
    n = workers
    found = [Mode("coupled", n, n, 2 * n), Mode("decoupled-2x", n, 2 * n, 3 * n)]
    found.append(Mode("decoupled-5x", n, 5 * n, 6 * n))
    if control_live is not None:
        found.append(Mode("control", control_live, control_live, control_live))
    return found


def episodes_needed(mode: Mode, cycles: int, group_size: int) -> int:
    """(cycles + 2) * C, in whole groups: a generation of ramp-up, the window, one in flight;
    one generation (C) when measuring from the start (``cycles`` 0)."""
    wanted = max(2, (cycles + 2) * mode.concurrency if cycles else mode.concurrency)
    return -(-wanted // group_size) * group_size


def steady_window(
    completions: Sequence[float], concurrency: int, cycles: int, started: float, ended: float
) -> tuple[float, float, bool]:
    """(start, end, steady): from the ``concurrency``-th completion over ``cycles`` whole cycles;
    else (``cycles`` 0, or too few completions) the whole run, ``started`` to ``ended``, with
    ``steady`` False: the run's last evaluations and releases are inside it, as they are inside the
    per-episode cost of the limit it is compared with (ending at the last completion would leave
    them out and measure above the limit by construction)."""
    if concurrency < 1 or cycles < 0:
        raise ValueError(f"steady_window needs concurrency >= 1 and cycles >= 0, got {concurrency}, {cycles}")
    if ended <= started:
        raise ValueError(f"steady_window: the run ended at {ended}, not after it started at {started}")
    done = sorted(completions)
    first = concurrency - 1
    last = first + cycles * concurrency
    if cycles == 0 or last >= len(done):
        return started, ended, False
    return done[first], done[last], True


def tasks(count: int) -> list[TaskSpec]:
    ref = McpServerRef(name=SERVER_NAME, tools=(TOOL,))
    check = EvaluatorSpec(func="raw", op="contain", value="done")
    instruction = "Task {}: wait for the latency tool, then say you are done."
    return [
        TaskSpec(
            instance_id=f"latency-{i:03d}",
            instruction=instruction.format(i),
            mcp_servers=(ref,),
            evaluators=(check,),
        )
        for i in range(count)
    ]
