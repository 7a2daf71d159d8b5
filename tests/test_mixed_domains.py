"""A run over several domains (``mix``): every domain's tasks interleaved, one server registry, every
hook module, each task answered by its own domain's expert, and eval rows per domain."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from launch.eval import parse_args, plan_eval
from launch.experts import run_expert
from specs.check import interleaved, load_split
from specs.config import DomainConfig, RunConfig, WarmStartConfig, load_run_config
from specs.errors import SpecError
from specs.servers import load_server_registries
from tests.test_eval import clean_env

REPO = Path(__file__).resolve().parent.parent
CALC = REPO / "specs" / "domains" / "calculator"
THIRDPARTY = REPO / "tests" / "servers" / "thirdparty" / "servers.json"


def clock_tasks(path: Path, n: int) -> Path:
    tasks = [
        {
            "instance_id": f"clock-{i}",
            "category": "clock",
            "question": f"What time is it in zone {i}?",
            "mcp_servers": [{"name": "time"}],
            "evaluators": [{"func": "raw", "op": "contain", "value": ":"}],
            "_zone": i,
        }
        for i in range(n)
    ]
    path.write_text(json.dumps(tasks))
    return path


def mixed_config(tmp_path: Path, **overrides: Any) -> Path:
    clock = clock_tasks(tmp_path / "clock.json", 3)
    config = {
        "run_name": "mixed",
        "warmstart": {"enabled": False},
        "mix": [
            {
                "name": "calculator",
                "tasks": str(CALC / "tasks" / "train.json"),
                "eval_tasks": str(CALC / "tasks" / "eval.json"),
                "servers": str(CALC / "servers.json"),
                "hook_modules": ["specs.domains.calculator.hooks"],
                "expert": "specs.domains.calculator.expert:respond",
            },
            {
                "name": "clock",
                "tasks": str(clock),
                "eval_tasks": str(clock),
                "servers": str(THIRDPARTY),
                "hook_modules": ["tests.hooks.undo"],
                "expert": "tests.test_mixed_domains:clock_expert",
            },
        ],
        **overrides,
    }
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps(config))  # JSON is YAML
    return path


def clock_expert(task: Any, conversation: str) -> str:
    return f"clock expert on zone {task.private['_zone']}"


def test_a_mixed_run_interleaves_every_domains_tasks_and_merges_servers_and_hooks(tmp_path: Path) -> None:
    cfg = load_run_config(mixed_config(tmp_path))
    assert [d.name for d in cfg.domains] == ["calculator", "clock"]
    assert cfg.hook_modules == ("specs.domains.calculator.hooks", "tests.hooks.undo")
    split = load_split(cfg, "eval", limit=2)
    assert [len(v) for v in split.values()] == [2, 2]
    assert [t.instance_id.split("-")[0] for t in interleaved(split)] == ["calc", "clock", "calc", "clock"]
    registry = load_server_registries([d.servers for d in cfg.domains])
    assert {"calculator", "time", "sqlite"} <= set(registry.names())


def test_each_task_is_answered_by_the_expert_of_its_own_domain(tmp_path: Path) -> None:
    cfg = load_run_config(mixed_config(tmp_path))
    split = load_split(cfg, "eval", limit=1)
    respond = run_expert(cfg, split)
    calc, clock = interleaved(split)
    assert respond(clock, "") == "clock expert on zone 0"
    assert "<tool_call>" in respond(calc, f"user: {calc.instruction}")


def test_eval_rows_are_the_mixed_runs_domains(tmp_path: Path) -> None:
    plan = plan_eval(
        parse_args(["--policy", "expert", "--config", str(mixed_config(tmp_path)), "--limit", "2"])
    )
    assert plan.domains is not None and sorted(set(plan.domains.values())) == ["calculator", "clock"]
    assert len(plan.tasks) == 4 and plan.expert is not None


def test_mixed_domains_must_have_names_of_their_own_and_experts_for_a_warm_start(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="each domain needs a name of its own"):
        load_run_config(None, ['mix=[{"name": "a"}, {"name": "a"}]', "warmstart.enabled=false"])
    with pytest.raises(SpecError, match="needs an expert for every mix entry"):
        load_run_config(None, ['mix=[{"name": "a"}, {"name": "b", "expert": null}]'])
    assert RunConfig(mix=(DomainConfig(name="a"), DomainConfig(name="b"))).hook_modules == (
        "specs.domains.calculator.hooks",
    )


def test_a_task_id_in_two_domains_and_a_server_given_twice_differently_are_refused(tmp_path: Path) -> None:
    clock = clock_tasks(tmp_path / "clock.json", 1)
    twice = {"name": "clock", "tasks": str(clock), "eval_tasks": str(clock), "servers": str(THIRDPARTY)}
    cfg = RunConfig(
        mix=(DomainConfig(**twice), DomainConfig(**{**twice, "name": "clock2"})),  # type: ignore[arg-type]
        warmstart=WarmStartConfig(enabled=False),
    )
    with pytest.raises(SpecError, match="task 'clock-0': also in"):
        load_split(cfg, "eval")
    other = tmp_path / "servers.json"
    other.write_text(json.dumps({"time": {"stdio": {"command": "python3", "args": ["-m", "elsewhere"]}}}))
    with pytest.raises(SpecError, match="server 'time': differs from the entry of the same name in"):
        load_server_registries([str(THIRDPARTY), str(other)])


@pytest.mark.slow
def test_the_shipped_mixed_config_runs_each_seed_domains_expert_with_a_row_per_domain(tmp_path: Path) -> None:
    """``launch/configs/mixed.yaml`` through ``launch/eval.py --policy expert`` on bwrap: one task of
    each seed domain, each solved by its own expert through its own servers."""
    command = [
        sys.executable,
        "launch/eval.py",
        "--policy",
        "expert",
        "--config",
        "launch/configs/mixed.yaml",
    ]
    command += ["--limit", "1", f"output_dir={tmp_path}", "run_name=mx", "ray.num_cpus=2"]
    done = subprocess.run(command, cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-5000:]
    lines = done.stdout.splitlines()
    assert lines[-1] == "success=1.0000 se=0.0000 lost=0"
    header = next(i for i, line in enumerate(lines) if line.startswith("domain"))
    rows = [lines[header + k].split()[:4] for k in (1, 2, 3, 4)]
    assert rows == [
        ["all", "3", "3", "1.00±0.00"],
        ["apps", "1", "1", "1.00±0.00"],
        ["research", "1", "1", "1.00±0.00"],
        ["swe", "1", "1", "1.00±0.00"],
    ]
