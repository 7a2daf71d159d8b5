"""The swe domain: its mutations, generated tasks, checkout prepare, hidden-test evaluator and expert.

The evaluator is checked in real environments (bwrap, and docker where an engine answers: there
the project comes from the domain image built from ``projects/Dockerfile``): the planted bug fails
the hidden tests it was recorded to fail, the pristine project passes, and an agent that broke
the project gets a failed check with a reason, not an exception. The expert episode runs the
production path on bwrap through PyPI's mcp-shell-server, unchanged. The recorded expert episode
(``tests/data/episodes/swe-*.json``) replays in ``tests/test_recorded_episodes.py``.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from specs.config import load_run_config
from specs.domains.swe import catalog, generate
from specs.domains.swe.hooks import checkout, hidden_tests
from specs.domains.swe.mutate import sites
from specs.domains.swe.testrun import MARKER
from specs.env import EnvConfig, EnvHandle
from specs.task import TaskSpec, load_tasks
from tests.backends import ISOLATED, environment, make_backend
from tests.episodes import run_domain
from tests.factories import answered

pytestmark = pytest.mark.anyio
REPO = Path(__file__).resolve().parent.parent
DOMAIN = REPO / "specs" / "domains" / "swe"
CONFIG = "launch/configs/swe.yaml"


def tasks(split: str = "eval") -> list[TaskSpec]:
    return load_tasks(DOMAIN / "tasks" / f"{split}.json")


def test_each_mutation_kind_edits_exactly_its_site() -> None:
    source = (
        "def f(xs, n=2, flag=True):\n"
        "    if not xs:\n"
        "        return 0\n"
        "    total = xs[0] + n\n"
        "    if total < 10 and flag:\n"
        "        total = max(total, 3)\n"
        "    return total\n"
    )
    found = {(m.kind, m.mutated) for m in sites(source, "f.py")}
    assert ("off_by_one_compare", "    if total <= 10 and flag:\n") in found
    assert ("wrong_operator", "    total = xs[0] - n\n") in found
    assert ("wrong_operator", "    if total < 10 or flag:\n") in found
    assert ("off_by_one_index", "    total = xs[1] + n\n") in found
    assert ("off_by_one_constant", "    if total < 11 and flag:\n") in found
    assert ("wrong_default", "def f(xs, n=3, flag=True):\n") in found
    assert ("wrong_default", "def f(xs, n=2, flag=False):\n") in found
    assert ("swapped_arguments", "        total = max(3, total)\n") in found
    assert ("negated_condition", "    if xs:\n") in found
    missing = [m for m in sites(source, "f.py") if m.kind == "missing_case"]
    assert [(m.line, m.original, m.mutated) for m in missing] == [
        (2, "    if not xs:\n        return 0\n    total = xs[0] + n\n", "    total = xs[0] + n\n")
    ]
    assert missing[0].apply(source) == source.replace("    if not xs:\n        return 0\n", "")


def test_a_mutation_refuses_a_file_that_does_not_read_its_original_lines() -> None:
    (mutation, *_) = sites("x = 1 + 2\n", "m.py")
    with pytest.raises(ValueError, match="m.py:1"):
        mutation.apply("y = 3\n")


def test_the_shipped_task_files_equal_a_fresh_generation(tmp_path: Path) -> None:
    generate.main(["--out", str(tmp_path)])
    for name in ("train.json", "eval.json"):
        assert (tmp_path / name).read_text() == (DOMAIN / "tasks" / name).read_text(), name


def test_eval_holds_out_a_project_and_a_mutation_kind() -> None:
    train, evals = tasks("train"), tasks("eval")
    assert 40 <= len(train) <= 100 and 16 <= len(evals) <= 32
    assert {t.private["_project"] for t in train} == set(generate.TRAIN_PROJECTS)
    assert "statkit" in {t.private["_project"] for t in evals}
    assert "swe/negated_condition" not in {t.category for t in train}
    assert "swe/negated_condition" in {t.category for t in evals}
    for task in train + evals:
        assert task.private["_hidden_failing"], task.instance_id
        assert (
            task.private["_mutation"]["original"] not in task.instruction
        )  # the report shows the symptom only
        assert task.build_args == {"PROJECT": task.private["_project"]}


def _environment_for(provisioner: Any, task: TaskSpec) -> Any:
    """An environment as a run makes one for ``task``: docker builds (once) the task's image."""
    return environment(
        provisioner,
        EnvConfig(dockerfile_path=task.dockerfile_path, build_args=dict(task.build_args))
        if provisioner.name == "docker"
        else EnvConfig(),
    )


def test_the_test_runner_removes_its_hidden_tests_folder(tmp_path: Path) -> None:
    temp, project = tmp_path / "tmp", tmp_path / "project"
    temp.mkdir()
    project.mkdir()
    hidden = {
        "check_one.py": "import unittest\n\nclass C(unittest.TestCase):\n    def test_x(self):\n        pass\n"
    }
    done = subprocess.run(
        [generate.PYTHON, "-c", catalog.runner_source()],
        input=json.dumps({"hidden": hidden, "nonce": "n"}),
        capture_output=True,
        text=True,
        cwd=project,
        env={"PATH": "/usr/bin:/bin", "TMPDIR": str(temp)},
        timeout=30,
    )
    report = json.loads(done.stdout.splitlines()[-1].removeprefix(f"{MARKER}n "))
    assert report["hidden_ran"] == 1 and report["hidden_failing"] == []
    assert list(temp.iterdir()) == []


@pytest.mark.parametrize("backend", ISOLATED)
async def test_the_hidden_tests_fail_on_the_planted_bug_and_pass_once_it_is_fixed(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    task = next(t for t in tasks() if t.private["_project"] == "statkit")
    provisioner = make_backend(backend, tmp_path / "envs")
    async with _environment_for(provisioner, task) as info:
        env = EnvHandle(info, provisioner)
        await checkout(env, task, **task.prepares[0].prepare_args)
        listing = (await env.run(["ls"])).stdout.split()
        assert {"Makefile", "statkit", "tests"} <= set(listing) and "check_statkit.py" not in listing
        broken = await hidden_tests(env, task, answered(), project="statkit")
        assert not broken.passed
        for name in task.private["_hidden_failing"]:
            assert name in broken.reason
        mutation = task.private["_mutation"]
        await env.write_file(mutation["file"], catalog.files("statkit")[mutation["file"]])
        fixed = await hidden_tests(env, task, answered(), project="statkit")
        assert fixed.passed, fixed.reason
        assert (await env.run(["make", "test"])).returncode == 0


@pytest.mark.parametrize("backend", ["bwrap"])
async def test_a_project_the_agent_broke_is_a_failed_check_with_a_reason(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    task = next(t for t in tasks() if t.private["_project"] == "intervals")
    provisioner = make_backend(backend, tmp_path / "envs")
    async with environment(provisioner) as info:
        env = EnvHandle(info, provisioner)
        await checkout(env, task, **task.prepares[0].prepare_args)
        await env.write_file("intervals/interval.py", "def oops(:\n")
        syntax = await hidden_tests(env, task, answered(), project="intervals")
        assert not syntax.passed and "SyntaxError" in syntax.reason
        await env.write_file("intervals/__init__.py", "import os\nos._exit(3)\n")
        exited = await hidden_tests(env, task, answered(), project="intervals")
        assert not exited.passed and "exit code 3" in exited.reason
        await env.write_file(
            "intervals/__init__.py", "print('SWE-RESULT " + '{"hidden_ran": 1, "hidden_failing": []}' + "')\n"
        )
        forged = await hidden_tests(env, task, answered(), project="intervals")
        assert not forged.passed  # a printed report without the evaluator's nonce does not count
        assert (await env.run(["rm", "-rf", "intervals", "tests"])).returncode == 0
        gone = await hidden_tests(env, task, answered(), project="intervals")
        assert not gone.passed and "fail" in gone.reason


async def test_the_expert_fixes_bugs_through_the_real_shell_server_on_bwrap(
    tmp_path: Path, tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    cfg = load_run_config(CONFIG)
    chosen = [tasks()[0], next(t for t in tasks() if t.category == "swe/missing_case")]
    episodes = await run_domain(cfg, chosen, "bwrap", tmp_path / "envs", tokenizer)
    assert [(e.status, e.succeeded) for e in episodes] == [("ok", True), ("ok", True)], [
        e.error for e in episodes
    ]
    for episode in episodes:
        names = [c.name for c in episode.tool_calls]
        assert names == ["shell__shell_execute"] * 3 and all(c.ok for c in episode.tool_calls)
        assert episode.score is not None and "hidden tests pass" in episode.score.verdicts[0].message
        commands = [json.dumps(c.arguments["command"]) for c in episode.tool_calls]
        assert (
            commands[0].startswith('["grep"')
            and commands[1].startswith('["patch"')
            and commands[2] == '["make", "test"]'
        )
