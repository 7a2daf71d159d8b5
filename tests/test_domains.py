"""Every shipped domain is data + hooks only: it loads, validates, and no framework code names it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from specs.registry import resolve_import
from specs.servers import load_server_registry
from specs.task import load_tasks
from specs.templates import StandIns, environment

REPO = Path(__file__).resolve().parent.parent
DOMAINS = sorted(p for p in (REPO / "specs" / "domains").iterdir() if (p / "servers.json").exists())
FRAMEWORK = ("actors", "policies", "rewards", "launch")


@pytest.mark.parametrize("domain", DOMAINS, ids=lambda p: p.name)
def test_a_shipped_domain_passes_the_spec_checker(domain: Path) -> None:
    files = [str(p) for p in sorted((domain / "tasks").glob("*.json"))] + [str(domain / "servers.json")]
    check = [sys.executable, "-m", "specs.check", "--servers", str(domain / "servers.json"), *files]
    result = subprocess.run(check, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    registry = load_server_registry(domain / "servers.json")
    for task_file in (domain / "tasks").glob("*.json"):
        for task in load_tasks(task_file, StandIns(environment())):  # templates: values at run time
            assert set(task.server_names) <= set(registry.names())


@pytest.mark.parametrize("domain", DOMAINS, ids=lambda p: p.name)
def test_a_shipped_domain_is_named_by_no_framework_module(domain: Path) -> None:
    """Adding or removing a domain never touches actors/, policies/, rewards/ or launch/ code."""
    module = f"specs.domains.{domain.name}"
    offenders = []
    for package in FRAMEWORK:
        for path in (REPO / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module]
                elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                    names = [node.value.split(":")[0]] if node.value.startswith("specs.domains.") else []
                offenders += [f"{path.relative_to(REPO)}: {n}" for n in names if n.startswith(module)]
    assert offenders == []


def test_the_calculator_expert_resolves_from_its_import_string() -> None:
    respond = resolve_import("specs.domains.calculator.expert:respond")
    task = load_tasks(REPO / "specs" / "domains" / "calculator" / "tasks" / "train.json")[0]
    first = respond(task, f"...{task.instruction}")
    assert "<tool_call>" in first and task.private["_expression"] in first
    second = respond(task, f"...{task.instruction}\n<tool_response>\n387\n</tool_response>")
    assert second.endswith("The answer is 387.")
