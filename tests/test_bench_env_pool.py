"""``launch/bench/env_pool.py``: its pure helpers pinned, and its ``--quick`` run on the local backend
in-process (fast), leaving no environment behind, also when it fails midway; its ``--nodes`` run on
a real two-node Ray cluster with a node killed mid-run (``launch/bench/env_nodes.py``)."""

from __future__ import annotations

import math
import re
import subprocess
import sys

import anyio
import pytest

from actors.provisioners.local import LocalProvisioner
from launch.bench import env_pool
from launch.bench.env_pool import BackendResult, envs_per_gib, percentile, ratios, summary_line
from tests.backends import REPO

SUMMARY_KEYS = {"create_p50_ms", "acquire_p50_ms", "reset_p50_ms", "destroy_p50_ms", "envs_per_gib"} | {
    "start_fresh_p50_ms", "start_kept_p50_ms", "start_speedup", "cpu_fresh_ms", "cpu_kept_ms"
}  # fmt: skip


def test_percentile_interpolates_between_ranks_like_numpy() -> None:
    assert percentile([4, 1, 3, 2], 50) == 2.5  # unsorted input
    assert percentile(range(1, 21), 95) == pytest.approx(19.05)
    assert percentile(range(1, 21), 50) == pytest.approx(10.5)
    assert (percentile([1, 2], 0), percentile([1, 2], 100)) == (1, 2)
    assert percentile([7.0], 95) == 7.0
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)
    with pytest.raises(ValueError, match="0..100"):
        percentile([1], 101)


def test_envs_per_gib_and_the_summary_lines() -> None:
    assert envs_per_gib(64) == 16 and math.isnan(envs_per_gib(0))
    local = BackendResult("local", pss_mib=32.0)
    local.ms = {op: [1.0, 2.0, 3.0] for op in env_pool.OPERATIONS}
    local.start_ms, local.cpu_ms = (
        {"fresh": [700.0, 800.0], "kept": [5.0, 800.0, 3.0]},
        {"fresh": 900, "kept": 60},
    )
    line = summary_line(local)
    assert line == (
        "env_pool: backend=local create_p50_ms=2.00 acquire_p50_ms=2.00 reset_p50_ms=2.00 "
        "destroy_p50_ms=2.00 envs_per_gib=32.00 start_fresh_p50_ms=750.00 start_kept_p50_ms=5.00 "
        "start_speedup=150.0 cpu_fresh_ms=900.0 cpu_kept_ms=60.0"
    )
    assert summary_line(BackendResult("docker", skipped="no engine")) == (
        "env_pool: backend=docker skipped: no engine"
    )
    docker = BackendResult("docker", pss_mib=64.0)
    docker.ms = {op: [10.0, 20.0, 30.0] for op in env_pool.OPERATIONS}
    (_, compared) = ratios([local, docker, BackendResult("bwrap", skipped="no bwrap")])
    assert compared.split() == [
        "docker", "create_x_local=10.0", "acquire_x_local=10.0", "reset_x_local=10.0",
        "destroy_x_local=10.0", "mem_x_local=2.0",
    ]  # fmt: skip
    assert ratios([docker]) == []  # nothing to compare with


def run_id_of(output: str) -> str:
    found = re.search(r"^run (bench-envpool-\w+):", output, re.MULTILINE)
    assert found, output
    return found.group(1)


def test_the_quick_local_run_prints_its_summary_and_leaves_no_env(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(REPO)  # the calculator's registry names its venv relative to the project root
    (result,) = env_pool.main(["--quick", "--backends", "local"])
    out = capsys.readouterr().out
    assert result.skipped is None and all(len(result.ms[op]) == 3 for op in env_pool.OPERATIONS)
    assert all(len(result.start_ms[arm]) == 3 for arm in env_pool.REUSE_ARMS)  # the bench checked: 2 kept
    (line,) = [line for line in out.splitlines() if line.startswith("env_pool: backend=local ")]
    figures = {key: float(value) for key, value in re.findall(r"(\w+)=([-\d.eE+]+)", line)}
    assert set(figures) == SUMMARY_KEYS
    assert all(math.isfinite(v) and v > 0 for v in figures.values()), figures
    # a live calculator server costs tens of MiB, not bytes (its processes were found) nor GiBs
    assert 5 < result.pss_mib < 500, result.pss_mib
    assert anyio.run(LocalProvisioner().list_owned, run_id_of(out)) == []


def test_a_run_that_fails_midway_still_destroys_its_envs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(REPO)

    def broken(envs: object) -> None:
        raise RuntimeError("measurement broke")

    monkeypatch.setattr(env_pool, "memory_mib", broken)  # after the live envs run their servers
    with pytest.raises(RuntimeError, match="measurement broke"):
        env_pool.main(["--quick", "--backends", "local"])
    assert anyio.run(LocalProvisioner().list_owned, run_id_of(capsys.readouterr().out)) == []


def test_a_backend_whose_runtime_is_missing_is_reported_as_skipped(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/mcprl-bench.sock")
    (result,) = env_pool.main(["--quick", "--backends", "docker"])
    assert result.skipped is not None and "no Docker API engine" in result.skipped
    assert "env_pool: backend=docker skipped: docker backend: no Docker API engine" in capsys.readouterr().out


@pytest.mark.slow
def test_episodes_on_a_mixed_two_node_ray_cluster_survive_a_killed_node_which_joins_again() -> None:
    """The worker runs bwrap, the head local (``env.node_groups``); the worker is killed mid-round,
    started again, joins between the rounds and serves its share of the second."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "launch.bench.env_pool",
            "--nodes",
            "2",
            "--tasks",
            "3",
            "--kill-node",
            "--mixed",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    last = done.stdout.strip().splitlines()[-1]
    figures = dict(re.findall(r"(\w+)=([\d.]+)", last))
    assert last.startswith("nodes=2 ") and "killing node" in done.stdout, done.stdout[-2000:]
    # every group whole (retried on the node left), nothing of the run left on the host
    whole = (figures["episodes"], figures["partial"], figures["leftovers"])
    assert whole == ("12", "0", "0"), done.stdout[-2000:]  # with the losses by cause
    assert int(figures["joined"]) >= 2 and "('bwrap', " in done.stdout and "('local', " in done.stdout, (
        done.stdout[-2000:]
    )
