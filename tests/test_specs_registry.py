"""Hook registry: decorators tag, resolution imports inside the caller, errors list what exists."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from actors.provisioners.local import LocalProvisioner
from rewards.ops import EvalOutcome
from specs.env import EnvConfig, EnvHandle
from specs.errors import SpecError
from specs.registry import available, evaluator, prepare, registered_names, resolve, resolve_import
from specs.task import TaskSpec

THIS = __name__
CALC_HOOKS = "specs.domains.calculator.hooks"


@evaluator("test.always_passes")
async def always_passes(env: Any, task: Any, trajectory: Any, **op_args: Any) -> EvalOutcome:
    return EvalOutcome(passed=True, reason=str(op_args))


@prepare("test.noop")
@evaluator("test.also_an_evaluator")
async def two_kinds(env: Any, task: Any, **args: Any) -> None:
    return None


def test_a_decorator_tags_the_function_and_returns_it_unchanged() -> None:
    assert registered_names(always_passes, "evaluator") == ["test.always_passes"]
    assert registered_names(always_passes, "prepare") == []
    assert registered_names(two_kinds, "prepare") == ["test.noop"]
    assert registered_names(two_kinds, "evaluator") == ["test.also_an_evaluator"]


def test_a_registered_name_resolves_within_the_named_modules() -> None:
    assert resolve("evaluator", "test.always_passes", [THIS]) is always_passes
    assert resolve("prepare", "test.noop", [THIS]) is two_kinds
    assert set(available("evaluator", [THIS])) == {"test.always_passes", "test.also_an_evaluator"}


def test_an_import_string_resolves_without_registration() -> None:
    assert resolve("prepare", f"{THIS}:always_passes", []) is always_passes
    assert resolve_import("specs.domains.calculator.expert:respond").__name__ == "respond"


def test_an_unknown_name_lists_the_available_names() -> None:
    with pytest.raises(SpecError) as info:
        resolve("evaluator", "test.nope", [THIS], source="tasks.json")
    assert info.value.file == "tasks.json"
    assert "available evaluator names: test.also_an_evaluator, test.always_passes" in info.value.message


def test_a_bad_import_string_or_module_names_it() -> None:
    with pytest.raises(SpecError, match="has no function 'missing'"):
        resolve_import(f"{THIS}:missing")
    with pytest.raises(SpecError, match="cannot import hook module"):
        resolve("prepare", "x", ["no_such_package.hooks"])
    with pytest.raises(SpecError, match="expected an import string"):
        resolve_import("just_a_name")


@pytest.mark.anyio
async def test_the_calculator_hooks_write_and_remove_a_file_in_a_local_environment(tmp_path: Path) -> None:
    provisioner = LocalProvisioner(root=tmp_path)
    info = await provisioner.create(EnvConfig(), run_id="test-registry")
    try:
        env = EnvHandle(info, provisioner)
        task = TaskSpec(instance_id="t", instruction="What is 6*7?")
        write = resolve("prepare", "calculator.write_instruction", [CALC_HOOKS])
        remove = resolve("cleanup", "calculator.remove_file", [CALC_HOOKS])
        with anyio.fail_after(30):
            await write(env, task, path="task.txt")
            assert (Path(info.workdir) / "task.txt").read_text() == "What is 6*7?\n"
            await remove(env, task, path="task.txt")
            await remove(env, task, path="task.txt")  # idempotent
        assert not (Path(info.workdir) / "task.txt").exists()
    finally:
        await provisioner.destroy(info)
