"""`ray job submit` of a short training run against a local `ray start --head` cluster.

The same `launch/train.py` that `make demo` runs in-process runs unchanged as a Ray job: real
vLLM generator, DeepSpeed learner, environment pool, MCP gateway and the third-party calculator
server. One step, two trajectories: it proves the path, not the learning.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
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
    dashboard = free_port()
    ray = str(bin_dir / "ray")
    start = [
        ray,
        "start",
        "--head",
        f"--port={free_port()}",
        f"--dashboard-port={dashboard}",
        "--dashboard-host=127.0.0.1",
        "--num-cpus=2",
        "--disable-usage-stats",
    ]
    subprocess.run(start, env=env, check=True, capture_output=True, timeout=180)
    try:
        job = subprocess.run(
            [
                ray,
                "job",
                "submit",
                f"--address=http://127.0.0.1:{dashboard}",
                "--working-dir",
                str(REPO),
                "--",
                "python",
                "launch/train.py",
                "--config",
                "launch/configs/demo.yaml",
                f"model.path={model_dir}",
                f"domain.servers={servers}",
                f"output_dir={tmp_path / 'runs'}",
                "run_name=job",
                "train.steps=1",
                "warmstart.demonstrations=2",
                "warmstart.epochs=1",
                "rollout.group_size=2",
                "rollout.tasks_per_step=1",
                "train.eval_tasks_limit=2",
                "rollout.max_turns=2",
                "rollout.max_new_tokens=48",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        output = job.stdout + job.stderr
        assert job.returncode == 0, output[-5000:]
    finally:
        subprocess.run([ray, "stop", "--force"], env=env, capture_output=True, timeout=120)
    assert "succeeded" in output
    assert "train: base_success=" in output
    run_dir = tmp_path / "runs" / "job"
    assert (run_dir / "trajectories" / "step_0001.jsonl").stat().st_size > 0
    assert list((run_dir / "wandb").glob("offline-run-*"))
    assert (run_dir / "checkpoint").is_dir()
