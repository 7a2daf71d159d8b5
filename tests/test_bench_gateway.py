"""``launch/bench/gateway.py``: its ``--quick`` run in-process ends with its summary line and
leaves no environment or server process behind, also when it fails midway. No wall-clock
assertions: the figures only have to be there and make sense (the machine is noisy)."""

from __future__ import annotations

import math
import re

import anyio
import psutil
import pytest

from actors.provisioners.local import ENV_MARKER, LocalProvisioner
from launch.bench import gateway as bench
from launch.bench.gateway import Arm, summary_line
from tests.backends import marked

SUMMARY = re.compile(r"gateway: p50_ratio=(\S+) p99_ratio=(\S+) calls_per_s=(\S+)")


def run_id_of(output: str) -> str:
    found = re.search(r"^run (bench-gateway-\w+):", output, re.MULTILINE)
    assert found, output
    return found.group(1)


def left_behind(run_id: str) -> list[object]:
    """The run's environments still on disk, and live processes started in any of them (the local
    backend points their HOME into ``<root>/<run_id>/<env_id>/home``)."""
    processes = []
    for proc in psutil.process_iter():
        try:
            if ENV_MARKER in (environ := proc.environ()) and f"/{run_id}/" in environ.get("HOME", ""):
                if proc.status() != psutil.STATUS_ZOMBIE:
                    processes.append(proc)
        except psutil.Error:
            continue
    return [*anyio.run(LocalProvisioner().list_owned, run_id), *processes]


def test_the_summary_line_and_calls_per_second() -> None:
    assert summary_line({"p50_ratio": 1.0449, "p99_ratio": 0.9, "calls_per_s": 712.345}) == (
        "gateway: p50_ratio=1.04 p99_ratio=0.90 calls_per_s=712.3"
    )
    sequential = Arm("seq", ms=[1.0, 3.0])  # 2 calls in 4 ms of summed latency
    concurrent = Arm("con", ms=[1.0, 3.0, 2.0, 2.0], wall_s=0.002)  # 4 calls in 2 ms of wall time
    assert (sequential.calls_per_s, concurrent.calls_per_s) == (500, 2000)


def test_the_quick_run_prints_its_table_and_summary_and_leaves_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = bench.main(["--quick"])
    out = capsys.readouterr().out
    last = out.rstrip("\n").splitlines()[-1]
    match = SUMMARY.fullmatch(last)
    assert match, f"the last line is not the summary line: {last!r}"
    p50_ratio, p99_ratio, calls_per_s = map(float, match.groups())
    assert all(math.isfinite(v) and v > 0 for v in (p50_ratio, p99_ratio, calls_per_s)), last
    assert (p50_ratio, p99_ratio, calls_per_s) == tuple(
        round(result[k], 2 if k != "calls_per_s" else 1) for k in ("p50_ratio", "p99_ratio", "calls_per_s")
    )
    for arm in ("bare ClientSession", "McpGateway", "bare, 2 sessions at once", "McpGateway, 2 envs at once"):
        (row,) = [line for line in out.splitlines() if line.startswith(f"{arm} ")]
        calls, *figures = row[len(arm) :].split()
        assert int(calls) == 60 and all(float(f) > 0 for f in figures), row
    # 1 + 1 sequential envs, 2 + 2 concurrent ones: all gone, with their server processes
    assert len(result["env_ids"]) == 6 and all(marked(env_id) == [] for env_id in result["env_ids"])
    assert left_behind(run_id_of(out)) == []


def test_a_run_that_fails_midway_still_destroys_its_envs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async def broken(*args: object) -> None:
        raise RuntimeError("measurement broke")

    monkeypatch.setattr(bench, "concurrent", broken)  # after every env runs a server
    with pytest.raises(RuntimeError, match="measurement broke"):
        bench.main(["--quick"])
    assert left_behind(run_id_of(capsys.readouterr().out)) == []
