"""``python -m specs.check``: detects each file's kind, prints every problem and exits 1, or summaries and 0."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data" / "specs"
CALC = REPO / "specs" / "domains" / "calculator"


def _check(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specs.check", *map(str, args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_shipped_domain_files_and_demo_config_pass_with_one_line_each() -> None:
    result = _check(
        CALC / "tasks" / "train.json",
        CALC / "servers.json",
        "launch/configs/demo.yaml",
        "--servers",
        CALC / "servers.json",
        "--hooks",
        "specs.domains.calculator.hooks",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"{CALC / 'tasks' / 'train.json'}: 200 tasks, servers: calculator",
        f"{CALC / 'servers.json'}: 1 server: calculator (stdio)",
        "launch/configs/demo.yaml: run config 'demo', domain calculator (200 + 48 tasks)",
    ]


def test_mcp_universe_files_pass_and_registered_ops_are_noted_as_unchecked() -> None:
    result = _check(DATA / "mcpuniverse_rl_tasks.json", DATA / "mcpuniverse_server_list.json")
    assert result.returncode == 0, result.stderr
    tasks_line, servers_line = result.stdout.splitlines()
    assert tasks_line.endswith(
        "2 tasks, servers: calculator, yfinance (1 registered evaluator ops not checked; pass --hooks)"
    )
    assert "google-search (stdio, needs SERP_API_KEY)" in servers_line
    assert "remote-docs (http_url, needs DOCS_TOKEN)" in servers_line


def test_every_problem_in_every_file_is_printed_and_the_exit_status_is_1(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.json"
    tasks.write_text(
        json.dumps(
            [
                {
                    "instruction": "a",
                    "mcp_servers": [{"name": "calculator"}, {"name": "weather"}],
                    "evaluators": [{"func": "jsn -> get(x)", "op": "="}],
                },
                {
                    "instruction": "b",
                    "mcp_servers": [{"name": "calculator"}],
                    "evaluators": [{"func": "raw"}],
                    "bogus": 1,
                },
            ]
        )
    )
    config = tmp_path / "run.yaml"
    config.write_text("rollout:\n  group_size: 1\n")
    result = _check(tasks, config, "--servers", CALC / "servers.json")
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert (
        lines[0]
        == f"{tasks}: task[1].bogus: unknown field; accepted fields: instance_id, instruction, question, "
        "mcp_servers, evaluators, output_format, category, use_specified_server, dockerfile_path, build_args, "
        "prepares, cleanups, reference_calls (and any field starting with '_')"
    )
    assert len(lines) == 2 and lines[1].startswith(f"{config}: rollout: rollout.group_size must be >= 2")
    assert result.stdout == ""


def test_semantic_problems_are_reported_once_the_file_parses(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.json"
    tasks.write_text(
        json.dumps(
            {
                "instruction": "a",
                "mcp_servers": [{"name": "calculator"}, {"name": "weather"}],
                "evaluators": [{"func": "jsn -> get(x)", "op": "="}, {"func": "raw", "op": "calc.nope"}],
                "prepares": [{"prepare_func": "calculator.write_instructions"}],
            }
        )
    )
    result = _check(tasks, "--servers", CALC / "servers.json", "--hooks", "specs.domains.calculator.hooks")
    assert result.returncode == 1
    wheres = [line.split(": ")[1] for line in result.stderr.splitlines()]
    assert wheres == [
        "task[0].mcp_servers[1].name",
        "task[0].evaluators[0].func",
        "task[0].evaluators[1].op",
        "task[0].prepares[0].prepare_func",
    ]
    assert "unknown MCP server 'weather'" in result.stderr and "known: calculator" in result.stderr
    assert "available prepare names: calculator.write_instruction" in result.stderr


@pytest.mark.parametrize(
    ("drop", "where"),
    [
        ("mcp_servers", "task[0].mcp_servers"),
        ("evaluators", "task[0].evaluators"),
        ("instruction", "task[0].instruction"),
    ],
)
def test_a_task_lacking_a_required_field_is_refused_naming_it(tmp_path: Path, drop: str, where: str) -> None:
    task = {
        "instruction": "What is 6*7?",
        "mcp_servers": [{"name": "calculator"}],
        "evaluators": [{"func": "number", "op": "=", "value": 42}],
    }
    del task[drop]
    for data in (task, [task]):  # one task object, and a list of them
        path = tmp_path / "task.json"
        path.write_text(json.dumps(data))
        result = _check(path)
        assert result.returncode == 1 and result.stdout == ""
        [line] = result.stderr.splitlines()
        assert line.startswith(f"{path}: {where}: missing"), line


def test_a_file_of_unknown_kind_is_refused(tmp_path: Path) -> None:
    odd = tmp_path / "odd.json"
    odd.write_text('{"hello": "world"}')
    result = _check(odd)
    assert result.returncode == 1 and "cannot tell the kind of file" in result.stderr


def test_a_task_file_with_templates_is_checked_without_their_values_and_says_what_it_needs(
    tmp_path: Path,
) -> None:
    task = {
        "question": "Open {{REPO_URL_X}}",
        "mcp_servers": [{"name": "calculator"}],
        "evaluators": [{"func": "raw", "op": "contain", "value": "{{OWNER_X}}"}],
    }
    (tmp_path / "t.json").write_text(json.dumps([task]))
    result = _check(tmp_path / "t.json")
    assert result.returncode == 0, result.stderr
    assert "1 task, servers: calculator, needs OWNER_X REPO_URL_X" in result.stdout


def test_the_spec_modules_import_no_ml_library() -> None:
    modules = (
        "specs.check, specs.config, specs.task, specs.servers, specs.registry, specs.domains.calculator.hooks"
    )
    code = (
        f"import sys, {modules}\n"
        "heavy = {'torch', 'vllm', 'ray', 'transformers', 'deepspeed'} & set(sys.modules)\n"
        "assert not heavy, heavy"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
