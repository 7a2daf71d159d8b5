"""`ray job submit` of a short training run against a local `ray start --head` cluster.

The same `launch/train.py` that `make demo` runs in-process runs unchanged as a Ray job: real
vLLM generator, DeepSpeed learner, environment pool, MCP gateway and the third-party calculator
server. One step, two trajectories: it proves the path, not the learning. The job keeps its warm
start (``warmstart.save``), and a second, in-process run starts from it (``warmstart.from_run``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_ray_job_submit_runs_a_short_training_job(tmp_path: Path, model_dir: Path) -> None:
    bin_dir = Path(sys.executable).parent
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "RAY_AUTH_MODE": "token",
        "WANDB_MODE": "offline",
    }
    # Not inherited from this process: an in-process Learner of an earlier test set the rendezvous
    # variables here, and its store still holds MASTER_PORT.
    for key in ("RAY_ADDRESS", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(key, None)
    # The working-dir upload skips .gitignored paths (.cache): name the model and server venv absolutely.
    servers = tmp_path / "servers.json"
    servers.write_text(
        json.dumps(
            {
                "calculator": {
                    "stdio": {
                        "command": str(REPO / ".cache" / "servers" / "calculator" / "bin" / "python"),
                        "args": ["-m", "mcp_server_calculator"],
                    }
                }
            }
        )
    )
    short_run = [
        "launch/train.py",
        "--config",
        "launch/configs/demo.yaml",
        f"model.path={model_dir}",
        f"domain.servers={servers}",
        f"output_dir={tmp_path / 'runs'}",
        "train.steps=1",
        "warmstart.demonstrations=2",
        "warmstart.epochs=1",
        "rollout.group_size=2",
        "rollout.tasks_per_step=1",
        "train.eval_tasks_limit=2",
        "rollout.max_turns=2",
        "rollout.max_new_tokens=48",
    ]
    dashboard = free_port()
    with local_head(bin_dir / "ray", dashboard, env, tmp_path / "head.log"):
        job = subprocess.run(
            [
                str(bin_dir / "ray"),
                "job",
                "submit",
                f"--address=http://127.0.0.1:{dashboard}",
                "--working-dir",
                str(REPO),
                "--",
                "python",
                *short_run,
                "run_name=job",
                "warmstart.save=true",
                "warmstart.reset_optimizer=false",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
    output = job.stdout + job.stderr
    assert job.returncode == 0, output[-5000:]
    assert "succeeded" in output
    assert "train: base_success=" in output
    run_dir = tmp_path / "runs" / "job"
    assert (run_dir / "trajectories" / "step_0001.jsonl").stat().st_size > 0
    assert list((run_dir / "wandb").glob("offline-run-*"))
    assert (run_dir / "checkpoint").is_dir()
    assert (run_dir / "warmstart" / "progress.json").is_file()

    # A second run from the job's warm start: no base eval nor warm start of its own, the job's
    # rows reported as its own, and its RL step draws the job's step-1 tasks (the same position).
    second = subprocess.run(
        [
            sys.executable,
            *short_run,
            "run_name=second",
            f"warmstart.from_run={run_dir}",
            "algorithm.kl_coef=0.01",
            "wandb.mode=disabled",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert second.returncode == 0, (second.stdout + second.stderr)[-5000:]
    assert f"warm start from {run_dir / 'warmstart'}" in second.stdout
    second_dir = tmp_path / "runs" / "second"

    def rows(run: Path, phase: str) -> list[dict[str, object]]:
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        return [r for r in records if r["phase"] == phase]

    for phase in ("eval/base", "warmstart", "eval/warmstart"):
        assert rows(second_dir, phase) == rows(run_dir, phase) and rows(run_dir, phase)
    assert (second_dir / "trajectories" / "eval_warmstart.jsonl").read_bytes() == (
        run_dir / "trajectories" / "eval_warmstart.jsonl"
    ).read_bytes()

    def step_tasks(run: Path) -> set[str]:
        lines = (run / "trajectories" / "step_0001.jsonl").read_text().splitlines()
        return {json.loads(line)["task_id"] for line in lines}

    assert step_tasks(second_dir) == step_tasks(run_dir)
    assert "train: base_success=" in second.stdout and "warmstart_success=" in second.stdout

    # The job's RL step went on with its warm start's AdamW moments (warmstart.reset_optimizer=false),
    # the second run's from fresh ones (the default): their final step counts are the warm start's,
    # or none, plus the step's one update (none when all its rewards were equal).
    assert "RL starts from fresh optimizer moments" in second.stdout
    assert "fresh optimizer moments" not in output
    (warm,) = optimizer_steps(run_dir / "warmstart")
    assert warm >= 1
    assert optimizer_steps(run_dir / "checkpoint") in ({warm}, {warm + 1})
    assert optimizer_steps(second_dir / "checkpoint") in (set(), {1})
    # Its KL reference is the policy its RL started from (the adopted warm start), not the base
    # model: zero at its first update (a step whose rewards were all equal updates nothing).
    assert all(row["kl"] == pytest.approx(0.0, abs=1e-6) for row in rows(second_dir, "train") if "kl" in row)


@contextmanager
def local_head(ray: Path, dashboard: int, env: dict[str, str], log: Path) -> Iterator[None]:
    """A `ray start --head --block` of this test's own, stopped by SIGTERM to that command.

    Not `ray stop --force`, which kills every Ray process on the machine: a benchmark or another
    test's cluster beside this one would die with it. The blocking head kills the processes it
    started when it gets SIGTERM, and they die with it in any case (kernel fate sharing). Its own
    ``--temp-dir`` keeps its address out of ``/tmp/ray/ray_current_cluster``, where a later
    ``ray.init()`` on this machine would find it and try to join a cluster that is gone. (Short:
    Ray's socket paths under it must fit in 107 bytes.)
    """
    temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    start = [
        str(ray),
        "start",
        "--head",
        "--block",
        f"--temp-dir={temp_dir}",
        f"--port={free_port()}",
        f"--dashboard-port={dashboard}",
        "--dashboard-host=127.0.0.1",
        "--num-cpus=2",
        "--disable-usage-stats",
    ]
    with log.open("w") as sink:
        head = subprocess.Popen(start, env=env, stdout=sink, stderr=subprocess.STDOUT)
    try:
        wait_for_dashboard(dashboard, head, log)
        yield
    finally:
        head.send_signal(signal.SIGTERM)
        try:
            head.wait(timeout=120)
        except subprocess.TimeoutExpired:
            head.kill()
            head.wait()
        shutil.rmtree(temp_dir, ignore_errors=True)


def wait_for_dashboard(port: int, head: subprocess.Popen[bytes], log: Path) -> None:
    """Until the dashboard answers HTTP at all (with token auth, unauthenticated requests get 401)."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        assert head.poll() is None, f"ray start --head exited {head.returncode}: {log.read_text()[-3000:]}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/version", timeout=5):
                return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(1)
    raise AssertionError(
        f"the Ray dashboard on port {port} did not answer in 180 s: {log.read_text()[-3000:]}"
    )


def optimizer_steps(checkpoint_dir: Path) -> set[int]:
    """The AdamW step counts in the latest DeepSpeed checkpoint of ``checkpoint_dir`` (ZeRO 0)."""
    import torch

    tag = (checkpoint_dir / "latest").read_text().strip()
    states = torch.load(
        checkpoint_dir / tag / "mp_rank_00_model_states.pt", map_location="cpu", weights_only=False
    )
    return {int(s["step"]) for s in states["optimizer"]["state"].values()}
