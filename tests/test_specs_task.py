"""Task files: MCP-Universe files load as they are; malformed ones are refused with file, index, field."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from specs.errors import SpecError, SpecErrors
from specs.task import CleanupSpec, EvaluatorSpec, McpServerRef, PrepareSpec, ReferenceCall, load_tasks
from specs.templates import environment

DATA = Path(__file__).parent / "data" / "specs"


def _task(instruction: str = "a", **fields: object) -> dict[str, object]:
    """A minimal valid task object, with ``fields`` added or replacing its defaults."""
    return {
        "instruction": instruction,
        "mcp_servers": [{"name": "calculator"}],
        "evaluators": [{"func": "number", "op": "=", "value": 1}],
        **fields,
    }


def _write(tmp_path: Path, data: object, name: str = "tasks.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_an_mcp_universe_benchmark_task_file_loads_as_it_is() -> None:
    [task] = load_tasks(DATA / "mcpuniverse_task.json")
    assert task.instance_id == "mcpuniverse_task"  # derived from the file stem: one task per file
    assert task.instruction.startswith("Which city hosts")  # from the `question` alias
    assert task.output_format == {"city": "[City name]", "country": "[Country name]"}
    assert task.use_specified_server is True
    assert task.mcp_servers == (McpServerRef(name="google-search"), McpServerRef(name="fetch"))
    assert task.evaluators[0] == EvaluatorSpec(
        func="json -> get(city)", op="=", value="Lisbon", desc="The city is right."
    )
    assert task.evaluators[1].op_args == {"key": "country"}
    assert task.prepares == (PrepareSpec(prepare_func="seed_calendar", prepare_args={"entries": 3}),)
    assert task.cleanups == (
        CleanupSpec(
            server="github",
            tool="create_repository",
            cleanup_func="delete_repository",
            cleanup_args={"owner": "$owner", "repo": "$name"},
        ),
    )
    assert task.private == {}


def test_an_mcp_universe_rl_training_list_loads_and_keeps_private_fields() -> None:
    tasks = load_tasks(DATA / "mcpuniverse_rl_tasks.json")
    assert [t.instance_id for t in tasks] == ["synth_0001", "synth_0002"]
    assert tasks[0].server_names == ("yfinance", "calculator")
    assert tasks[0].dockerfile_path == "/some/where/Dockerfile.base"
    assert tasks[0].private["_solution_output"] == {"total value": 11234.5, "total percentage return": 12.35}
    assert tasks[0].private["_validated"] is True
    assert tasks[1].evaluators[0].value == ["buy", "sell", "hold"]


def test_a_list_without_instance_ids_gets_stable_ids_from_stem_and_index(tmp_path: Path) -> None:
    path = _write(tmp_path, [_task("a"), _task("b")], "algebra.json")
    assert [t.instance_id for t in load_tasks(path)] == ["algebra-0000", "algebra-0001"]
    assert [t.instance_id for t in load_tasks(path)] == ["algebra-0000", "algebra-0001"]


def test_an_unknown_field_is_refused_naming_file_task_index_field_and_accepted_fields(tmp_path: Path) -> None:
    path = _write(tmp_path, [_task("a"), _task("b", answer=42)])
    with pytest.raises(SpecError) as info:
        load_tasks(path)
    err = info.value
    assert err.file == str(path)
    assert err.where == "task[1].answer"
    assert "unknown field" in err.message and "instruction" in err.message and "evaluators" in err.message
    assert str(err).startswith(f"{path}: task[1].answer: unknown field")


def test_an_unknown_field_inside_an_evaluator_names_its_path(tmp_path: Path) -> None:
    path = _write(tmp_path, _task(evaluators=[{"func": "raw", "operator": "="}]))
    with pytest.raises(SpecError) as info:
        load_tasks(path)
    assert info.value.where == "task[0].evaluators[0].operator"
    assert "accepted fields: func, op, value, op_args, desc" in info.value.message


def test_a_wrong_type_names_the_field_and_the_expected_type(tmp_path: Path) -> None:
    path = _write(tmp_path, _task(evaluators=[{"func": "raw", "op": 3}]))
    with pytest.raises(SpecError) as info:
        load_tasks(path)
    assert info.value.where == "task[0].evaluators[0].op"
    assert "Expected `str`, got `int`" in info.value.message


def test_every_problem_of_a_file_is_reported_not_only_the_first(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        [
            _task("ok"),
            _task("a", extra=1),
            {"mcp_servers": [{"name": "x"}], "evaluators": [{"func": "raw"}]},
            _task("b", use_specified_server="yes"),
        ],
    )
    with pytest.raises(SpecErrors) as info:
        load_tasks(path)
    assert [p.where for p in info.value.problems] == [
        "task[1].extra",
        "task[2].instruction",
        "task[3].use_specified_server",
    ]
    assert "missing 'instruction' (or its alias 'question')" in info.value.problems[1].message


def test_instruction_and_a_different_question_are_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, _task("a", question="b"))
    with pytest.raises(SpecError, match="differ"):
        load_tasks(path)


def test_duplicate_instance_ids_are_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, [_task("a", instance_id="x"), _task("b", instance_id="x")])
    with pytest.raises(SpecError) as info:
        load_tasks(path)
    assert info.value.where == "task[1].instance_id" and "first at task[0]" in info.value.message


def test_invalid_json_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('[{"instruction": "a",}]', encoding="utf-8")
    with pytest.raises(SpecError) as info:
        load_tasks(path)
    assert info.value.where.startswith("line 1 column") and "invalid JSON" in info.value.message


def test_spec_errors_survive_pickling_as_ray_ships_them(tmp_path: Path) -> None:
    path = _write(tmp_path, [_task("a", x=1), _task("b", y=2)])
    with pytest.raises(SpecErrors) as info:
        load_tasks(path)
    copy = pickle.loads(pickle.dumps(info.value))
    assert [(p.file, p.where) for p in copy.problems] == [(str(path), "task[0].x"), (str(path), "task[1].y")]
    single = pickle.loads(pickle.dumps(info.value.problems[0]))
    assert (single.file, single.where, single.message) == (
        info.value.problems[0].file,
        info.value.problems[0].where,
        info.value.problems[0].message,
    )


def test_reference_calls_load_with_required_keys_defaulting_to_every_argument(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        _task(
            mcp_servers=[{"name": "calculator", "tools": ["multiply", "subtract"]}],
            reference_calls=[
                {"server": "calculator", "tool": "multiply", "arguments": {"a": 17, "b": 25}},
                {
                    "server": "calculator",
                    "tool": "subtract",
                    "arguments": {"a": 425, "b": 38, "note": "x"},
                    "required": ["a", "b"],
                    "_why": "private notes inside a reference call are dropped",
                },
                {"server": "calculator", "tool": "multiply", "arguments": {"a": 1}, "required": []},
            ],
        ),
    )
    [task] = load_tasks(path)
    first, second, third = task.reference_calls
    assert first == ReferenceCall(server="calculator", tool="multiply", arguments={"a": 17, "b": 25})
    assert first.name == "calculator__multiply"
    assert first.required is None and first.required_keys == ("a", "b")
    assert second.required_keys == ("a", "b") and second.arguments["note"] == "x"
    assert third.required_keys == ()  # an explicit empty list: nothing is required


def test_a_task_without_reference_calls_has_none() -> None:
    [task] = load_tasks(DATA / "mcpuniverse_task.json")
    assert task.reference_calls == ()


def test_an_unknown_field_inside_a_reference_call_names_its_path_and_the_accepted_fields(
    tmp_path: Path,
) -> None:
    path = _write(
        tmp_path,
        _task(reference_calls=[{"server": "calculator", "tool": "t", "args": {"x": 1}}]),
    )
    with pytest.raises(SpecError) as info:
        load_tasks(path)
    assert info.value.where == "task[0].reference_calls[0].args"
    assert "accepted fields: server, tool, arguments, required" in info.value.message


def test_a_reference_call_of_the_wrong_type_names_the_field(tmp_path: Path) -> None:
    path = _write(tmp_path, _task(reference_calls=[{"server": "calculator", "tool": "t", "arguments": [1]}]))
    with pytest.raises(SpecError) as info:
        load_tasks(path)
    assert info.value.where == "task[0].reference_calls[0].arguments"
    assert "Expected `object`, got `array`" in info.value.message


def test_every_bad_reference_call_is_reported_with_file_task_and_field(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        [
            _task(
                mcp_servers=[{"name": "calculator", "tools": ["add"]}, {"name": "fetch"}],
                reference_calls=[
                    {"server": " ", "tool": ""},
                    {"server": "calculator", "tool": "add", "arguments": {"a": 1}, "required": ["a", "b"]},
                    {"server": "calculator", "tool": "add", "arguments": {"a": 1}, "required": ["a", "a"]},
                    {"server": "weather", "tool": "forecast"},
                    {"server": "calculator", "tool": "divide"},
                    {"server": "fetch", "tool": "anything"},
                ],
            )
        ],
    )
    with pytest.raises(SpecErrors) as info:
        load_tasks(path)
    problems = info.value.problems
    assert all(p.file == str(path) for p in problems)
    assert [p.where for p in problems] == [
        "task[0].reference_calls[0].server",
        "task[0].reference_calls[0].tool",
        "task[0].reference_calls[1].required",
        "task[0].reference_calls[2].required",
        "task[0].reference_calls[3].server",
        "task[0].reference_calls[4].tool",
    ]  # reference_calls[5] is fine: the task shows every tool of fetch
    assert "empty; expected the server's name" in problems[0].message
    assert "required key 'b' is not among the arguments ('a')" in problems[2].message
    assert "listed twice" in problems[3].message
    assert "'weather' is not among the task's mcp_servers (calculator, fetch)" in problems[4].message
    assert "'divide' is not among the tools the task shows of 'calculator' (add)" in problems[5].message


@pytest.mark.parametrize("field", ["mcp_servers", "evaluators"])
def test_a_task_without_servers_or_evaluators_is_refused_naming_file_task_and_field(
    tmp_path: Path, field: str
) -> None:
    task = _task()
    del task[field]
    path = _write(tmp_path, [_task(), task])
    with pytest.raises(SpecError) as info:
        load_tasks(path)
    assert (info.value.file, info.value.where) == (str(path), f"task[1].{field}")
    assert info.value.message.startswith("missing: ") and "at least one" in info.value.message
    assert str(info.value).startswith(f"{path}: task[1].{field}: missing")


def test_a_task_without_instruction_or_question_is_refused_naming_the_field(tmp_path: Path) -> None:
    task = _task()
    del task["instruction"]
    path = _write(tmp_path, task)
    with pytest.raises(SpecError) as info:
        load_tasks(path)
    assert info.value.where == "task[0].instruction"
    assert info.value.message == "missing 'instruction' (or its alias 'question'): the prompt of the task"
    [loaded] = load_tasks(_write(tmp_path, {**task, "question": "What is 6*7?"}))
    assert loaded.instruction == "What is 6*7?"


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"mcp_servers": []}, "task[0].mcp_servers"),
        ({"evaluators": []}, "task[0].evaluators"),
        ({"instruction": "  "}, "task[0].instruction"),
    ],
)
def test_an_empty_prompt_server_list_or_evaluator_list_is_refused(
    tmp_path: Path, fields: dict[str, object], where: str
) -> None:
    with pytest.raises(SpecError) as info:
        load_tasks(_write(tmp_path, _task(**fields)))
    assert info.value.where == where and info.value.message.startswith("empty; expected ")


def test_an_empty_question_is_refused_under_its_own_name(tmp_path: Path) -> None:
    task = _task(question="")
    del task["instruction"]
    with pytest.raises(SpecError) as info:
        load_tasks(_write(tmp_path, task))
    assert info.value.where == "task[0].question"


def test_missing_and_unknown_fields_of_a_task_are_reported_together(tmp_path: Path) -> None:
    path = _write(tmp_path, [{"question": "a", "servers": [{"name": "calculator"}]}])
    with pytest.raises(SpecErrors) as info:
        load_tasks(path)
    assert [(p.file, p.where) for p in info.value.problems] == [
        (str(path), "task[0].servers"),
        (str(path), "task[0].mcp_servers"),
        (str(path), "task[0].evaluators"),
    ]
    assert (
        "unknown field; accepted fields: instance_id, instruction, question" in info.value.problems[0].message
    )


def test_templates_in_any_task_field_are_filled_from_the_given_variables_then_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    task = _task(
        "Open an issue in {{OWNER}}/{{ REPO }}.",
        evaluators=[
            {"func": "raw", "op": "contain", "value": "{{OWNER}}", "op_args": {"url": "{{JUDGE_URL}}/v1"}}
        ],
        prepares=[{"prepare_func": "seed", "prepare_args": {"names": ["{{OWNER}}", 3]}}],
        _owner="{{OWNER}}",
    )
    path = _write(tmp_path, [task])
    monkeypatch.setenv("OWNER", "from-env")
    monkeypatch.setenv("REPO", "mcprl")
    monkeypatch.setenv("JUDGE_URL", "http://127.0.0.1:9")
    (loaded,) = load_tasks(path, environment({"OWNER": "acme"}))
    assert loaded.instruction == "Open an issue in acme/mcprl."
    assert loaded.evaluators[0].value == "acme"
    assert loaded.evaluators[0].op_args == {"url": "http://127.0.0.1:9/v1"}
    assert loaded.prepares[0].prepare_args == {"names": ["acme", 3]}
    assert loaded.private == {"_owner": "acme"}
    (from_env,) = load_tasks(path)  # default: the process environment
    assert from_env.instruction == "Open an issue in from-env/mcprl."


def test_an_unset_template_variable_is_refused_naming_task_field_and_variable(tmp_path: Path) -> None:
    path = _write(tmp_path, [_task("ok"), _task("Fix {{NOPE_VAR}}", evaluators=[{"func": "{{ALSO_NOPE}}"}])])
    with pytest.raises(SpecErrors) as info:
        load_tasks(path, {"NOPE_VAR": ""})  # empty counts as unset, as in MCP-Universe
    text = str(info.value)
    assert "task[1].instruction: template variable NOPE_VAR is not set" in text
    assert "task[1].evaluators[0].func: template variable ALSO_NOPE is not set" in text
    assert "domain.task_vars" in text
