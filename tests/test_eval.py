"""launch/eval.py: arguments, model paths, the table and the JSON as pure functions; one real run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from launch.eval import main, model_tag, parse_args, plan_eval, report, resolve_model_dir, task_domains
from launch.eval_report import format_table, rows_json, summary_line
from specs.errors import SpecError
from specs.observation_rule import ObservationRule

REPO = Path(__file__).resolve().parent.parent


def hf_dir(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    return path


def test_defaults_are_one_greedy_pass_over_every_eval_task() -> None:
    args = parse_args(["--model", "m", "train.steps=1"])
    assert (args.split, args.limit, args.samples, args.temperature, args.by) == (
        "eval",
        None,
        0,
        None,
        "domain",
    )
    assert args.overrides == ["train.steps=1"] and args.observation_rule is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "m", "--limit", "0"], "argument --limit: expected an integer >= 1, got 0"),
        (["--model", "m", "--limit", "two"], "argument --limit: expected an integer, got 'two'"),
        (["--model", "m", "--samples", "-1"], "argument --samples: expected an integer >= 0, got -1"),
        (["--model", "m", "--samples", "2", "--temperature", "0"], "expected a temperature > 0"),
        (["--model", "m", "--temperature", "0.7"], "give --samples K >= 1 too"),
        (["--model", "m", "--split", "test"], "invalid choice: 'test'"),
        (["--model", "m", "stray"], "expected --options or key.path=value overrides"),
        (["--model", "m", "--observation-rule", '{"keep_last":2}'], "fields among: keep_last_costly"),
        (["--model", "m", "--observation-rule", '{"keep_last_costly": 0}'], "argument --observation-rule"),
        (["--split", "eval"], "argument --model is required with --policy model"),
        (["--policy", "expert", "--samples", "2"], "the scripted expert is deterministic"),
        (["--policy", "oracle"], "invalid choice: 'oracle'"),
    ],
)
def test_bad_arguments_exit_2_naming_the_argument(argv: list[str], message: str, capsys: Any) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_args(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_an_observation_rule_is_parsed_into_its_struct() -> None:
    args = parse_args(["--model", "m", "--observation-rule", '{"keep_last_costly": 2}', "--samples", "3"])
    assert args.observation_rule == ObservationRule(keep_last_costly=2) and args.samples == 3


def test_a_model_is_a_hf_dir_a_checkpoint_dir_or_a_run_dir(tmp_path: Path) -> None:
    base = hf_dir(tmp_path / "SmolLM2")
    run = tmp_path / "runs" / "demo"
    export = hf_dir(run / "checkpoint" / "hf")
    (run / "checkpoint" / "latest").write_text("version4")
    assert resolve_model_dir(str(base)) == str(base)
    assert resolve_model_dir(str(run / "checkpoint")) == str(export)
    assert resolve_model_dir(str(run)) == str(export)
    assert resolve_model_dir(str(export) + "/") == str(export)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p / "missing", "no such file or directory"),
        (lambda p: _touch(p / "weights-v3.safetensors"), "a bare weights file (Learner.export_weights)"),
        (lambda p: _touch(p / "ckpt" / "latest").parent, "a DeepSpeed checkpoint without its hf/ export"),
        (lambda p: _touch(p / "empty" / "README").parent, "no config.json in it"),
    ],
)
def test_a_path_that_is_no_model_is_refused_with_what_to_pass(
    tmp_path: Path, make: Any, message: str
) -> None:
    path = str(make(tmp_path))
    with pytest.raises(SpecError, match="--model") as error:
        resolve_model_dir(path)
    assert message in str(error.value) and error.value.file == path


def _touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("x")
    return path


def test_a_model_tag_names_the_run_of_a_checkpoint() -> None:
    assert model_tag(".cache/models/SmolLM2-135M-Instruct") == "SmolLM2-135M-Instruct"
    assert model_tag("runs/demo/checkpoint/hf") == "demo-checkpoint"
    assert model_tag("runs/demo/checkpoint") == "demo-checkpoint"
    assert model_tag("/models/my model:v2") == "my-model-v2"


class Task(msgspec.Struct):
    instance_id: str
    category: str


def test_domains_are_the_category_up_to_its_first_slash() -> None:
    tasks = [Task("a", "arithmetic/add"), Task("b", "arithmetic/sub"), Task("c", "general")]
    assert task_domains(tasks, "domain") == {"a": "arithmetic", "b": "arithmetic", "c": "general"}
    assert task_domains(tasks, "category") == {"a": "arithmetic/add", "b": "arithmetic/sub", "c": "general"}
    assert task_domains(tasks, "none") is None
    with pytest.raises(ValueError, match="by='task'"):
        task_domains(tasks, "task")


ROWS = {
    "all": {
        "episodes": (4.0, 0.0),
        "tasks": (4.0, 0.0),
        "success": (0.5, 0.288675),
        "tool_calls": (1.25, 0.478714),
        "reasoning_tokens": (0.5, 0.288675),
        "task_adoption": (0.5, 0.288675),
        "tool_step_share": (0.625, 0.146576),
        "false_success": (0.25, 0.25),
        "hallucinated_tools": (0.75, 0.478714),
        "input_tokens": (7.0, 2.12132),
    },
    "geo": {"episodes": (0.0, 0.0)},
}


def test_the_table_has_a_row_per_domain_and_mean_plus_minus_se_cells() -> None:
    lines = format_table(ROWS).splitlines()
    assert lines[0].split() == [
        "domain", "n", "tasks", "success", "chain", "cot", "tok", "task", "adopt", "tool", "steps",
        "false", "succ", "halluc", "input", "tok",
    ]  # fmt: skip
    assert lines[1].split() == [
        "all", "4", "4", "0.50±0.29", "1.25±0.48", "0.5±0.3", "0.50±0.29", "0.62±0.15", "0.25±0.25",
        "0.75±0.48", "7±2",
    ]  # fmt: skip
    assert lines[2].split() == ["geo", "0", "-", "-", "-", "-", "-", "-", "-", "-", "-"]
    assert len({len(line) for line in lines}) == 1  # aligned columns
    hybrid = {"all": {**ROWS["all"], "gui_step_share": (0.25, 0.1)}}  # a GUI + MCP domain adds a column
    header, row = format_table(hybrid).splitlines()
    assert "gui steps" in header and row.split()[8] == "0.25±0.10"


def test_the_json_holds_mean_and_stderr_of_every_metric(tmp_path: Path, monkeypatch: Any) -> None:
    assert rows_json(ROWS)["all"]["success"] == {"mean": 0.5, "stderr": 0.288675}
    assert summary_line({"greedy": ROWS, "sampled": ROWS}) == (
        "eval: greedy_success=0.50±0.29 greedy_task_adoption=0.50±0.29 "
        "sampled_success=0.50±0.29 sampled_task_adoption=0.50±0.29"
    )
    monkeypatch.chdir(REPO)
    model = hf_dir(tmp_path / "m")
    args = parse_args(
        ["--model", str(model), "--limit", "3", "--observation-rule", '{"keep_last_costly": 2}']
        + [f"output_dir={tmp_path}", "run_name=ev"]
    )
    plan = plan_eval(args)
    assert [t.instance_id for t in plan.tasks] == [f"calc-eval-seen-000{i}" for i in range(3)]
    assert plan.output == str(tmp_path / "ev" / "eval-eval-m.json")
    assert plan.cfg.model.path == str(model)
    assert plan.domains == {t.instance_id: "arithmetic" for t in plan.tasks}
    document = report(
        plan, {"greedy": {"temperature": 0.0, "episodes_per_task": 1, "lost": {}, "rows": ROWS}}
    )
    encoded = json.loads(msgspec.json.encode(document))
    assert encoded["runs"]["greedy"]["rows"]["geo"] == {"episodes": {"mean": 0.0, "stderr": 0.0}}
    assert (encoded["model"], encoded["split"], encoded["tasks"], encoded["max_turns"]) == (
        str(model),
        "eval",
        3,
        3,
    )
    assert encoded["observation_rule"]["keep_last_costly"] == 2


def test_bad_input_exits_2_before_anything_starts(tmp_path: Path, monkeypatch: Any, capsys: Any) -> None:
    monkeypatch.chdir(REPO)
    assert main(["--model", str(tmp_path / "nope")]) == 2
    assert "eval: bad input:" in capsys.readouterr().err
    model = str(hf_dir(tmp_path / "m"))
    assert main(["--model", model, "domain.eval_tasks=missing.json"]) == 2
    assert "missing.json" in capsys.readouterr().err
    assert main(["--model", model, "rollout.group_size=1"]) == 2
    assert "rollout.group_size" in capsys.readouterr().err


def clean_env() -> dict[str, str]:
    env = dict(os.environ)
    # Not inherited: an in-process Learner or Ray of an earlier test may have set these here.
    for key in ("RAY_ADDRESS", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(key, None)
    return env


@pytest.mark.slow
def test_the_expert_policy_runs_the_pipeline_without_a_model_and_ends_with_the_success_line(
    tmp_path: Path, model_dir: Path
) -> None:
    command = [sys.executable, "launch/eval.py", "--policy", "expert", "--limit", "3"]
    command += [f"output_dir={tmp_path}", "run_name=ex", "ray.num_cpus=2"]
    done = subprocess.run(command, cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-5000:]
    assert done.stdout.splitlines()[-1] == "success=1.0000 se=0.0000 lost=0"
    assert "the expert specs.domains.calculator.expert:respond" in done.stdout
    assert "generator" not in done.stderr  # none was started, none was stopped
    result = json.loads((tmp_path / "ex" / "eval-eval-expert.json").read_text())
    assert result["policy"] == "expert" and result["tasks"] == 3


UNSEEN_TASKS = [
    {
        "instance_id": "clock-0",
        "category": "clock/convert",
        "question": "It is 09:30 in Europe/Paris. What time is it then in Asia/Tokyo? Use the time tools.",
        "output_format": "End with: The time is HH:MM.",
        "mcp_servers": [{"name": "time"}],
        "evaluators": [{"func": "raw", "op": "contain", "value": "{{EXPECTED_TIME}}"}],
    },
    {
        "instance_id": "notes-0",
        "category": "notes/sql",
        "question": "Create a table notes(id INTEGER, body TEXT) in the database and say DONE.",
        "mcp_servers": [{"name": "sqlite", "tools": ["create_table", "list_tables"]}],
        "evaluators": [{"func": "raw", "op": "contain", "value": "DONE"}],
    },
]
"""A task set the code has never seen: two third-party servers from PyPI (``mcp-server-time``,
``mcp-server-sqlite``, unchanged, from ``tests/servers/thirdparty``), generic ops only, no hooks,
no expert, a ``{{VAR}}`` filled from ``domain.task_vars``."""


@pytest.mark.slow
def test_a_greedy_eval_of_the_demo_model_on_an_unseen_task_set_runs_with_no_code_change(
    tmp_path: Path, model_dir: Path
) -> None:
    tasks = tmp_path / "unseen.json"
    tasks.write_text(json.dumps(UNSEEN_TASKS))
    env = clean_env()
    command = [
        sys.executable,
        "launch/eval.py",
        "--model",
        str(model_dir),
        f"output_dir={tmp_path}",
        "run_name=ev",
        f"domain.eval_tasks={tasks}",
        "domain.servers=tests/servers/thirdparty/servers.json",
        "domain.hook_modules=[]",
        "domain.expert=null",
        "warmstart.enabled=false",
        "domain.task_vars.EXPECTED_TIME=16:30",
        "rollout.max_new_tokens=48",
        "rollout.max_context_tokens=4096",
        "generator.max_model_len=4096",
        "ray.num_cpus=2",
    ]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-5000:]
    assert "eval: greedy_success=" in done.stdout
    assert done.stdout.splitlines()[-1].startswith("success=")
    assert done.stdout.splitlines()[-1].endswith(" lost=0")
    lines = done.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("domain"))
    assert [lines[header + k].split()[:3] for k in (1, 2, 3)] == [
        ["all", "2", "2"],
        ["clock", "1", "1"],
        ["notes", "1", "1"],
    ]
    result = json.loads((tmp_path / "ev" / f"eval-eval-{model_dir.name}.json").read_text())
    greedy = result["runs"]["greedy"]
    assert result["tasks"] == 2 and greedy["temperature"] == 0.0 and greedy["lost"] == {}
    assert greedy["rows"]["all"]["episodes"] == {"mean": 2.0, "stderr": 0.0}
    assert 0.0 <= greedy["rows"]["all"]["success"]["mean"] <= 1.0
    assert greedy["rows"]["all"]["input_tokens"]["mean"] > 0  # the prompt alone is read at turn 1
    episodes = [json.loads(line) for line in Path(greedy["trajectories"]).read_text().splitlines()]
    assert len(episodes) == 2
    assert (
        any("16:30" in m["content"] for e in episodes for m in e["messages"] if m["role"] == "user") is False
    )
