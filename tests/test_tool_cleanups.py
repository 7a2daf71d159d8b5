"""Per-tool-call cleanups (MCP-Universe ``cleanups[].tool``): which calls owe which cleanup, with
what arguments (``specs.cleanup_calls``), and the pipeline running them against real servers: a
server's tool while its session is open, then a registered hook in the pool, before the reset."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from actors.env_pool import EnvPool
from actors.evaluator import Evaluator
from actors.mcp_gateway import McpGateway
from actors.rollout import RolloutPipeline, env_config_resolver
from policies.react import EpisodeLimits
from policies.scripted import ScriptedEngine
from policies.tokens import ChatRecorder
from policies.types import SamplingConfig
from specs.cleanup_calls import cleanup_calls
from specs.errors import SpecError
from specs.servers import load_server_registry
from specs.task import parse_tasks
from specs.trajectory import ToolCallRecord
from tests.backends import EDGE_SERVER, make_backend, run_id
from tests.hooks import undo

pytestmark = pytest.mark.anyio


def task(cleanups: list[dict[str, Any]]) -> Any:
    raw = {
        "instance_id": "t",
        "instruction": "write a.txt",
        "mcp_servers": [{"name": "edge", "tools": ["write_file", "measure", "echo"]}],
        "evaluators": [{"func": "raw", "op": "contain", "value": "done"}],
        "cleanups": cleanups,
    }
    return parse_tasks([raw], "tasks.json", {})[0]


def record(
    turn: int, tool: str, arguments: dict[str, Any], text: str = "", ok: bool = True
) -> ToolCallRecord:
    return ToolCallRecord(
        turn=turn,
        name=f"edge__{tool}",
        arguments=arguments,
        ok=ok,
        error_kind=None if ok else "tool_error",
        latency_s=0.0,
        output_bytes=len(text),
        server="edge",
        tool=tool,
        returned={"content": [{"type": "text", "text": text}], "structuredContent": None, "isError": not ok},
    )


UNDO_WRITE = {
    "server": "edge",
    "tool": "write_file",
    "cleanup_func": "tests.undo",
    "cleanup_args": {"name": "$name"},
}


def test_each_successful_call_owes_its_cleanups_newest_first_with_arguments_read_from_the_call() -> None:
    spec = task(
        [
            UNDO_WRITE,
            {
                "server": "edge",
                "tool": "measure",
                "cleanup_func": "echo",
                "cleanup_args": {
                    "text": "$return -> get(content) -> array(0) -> get(text) -> json -> get(n)"
                },
            },
            {"cleanup_func": "tests.undo", "cleanup_args": {"name": "x"}},  # not bound to a tool: the pool's
        ]
    )
    calls = [
        record(1, "write_file", {"name": "a.txt", "text": "1"}),
        record(2, "measure", {"text": "abc"}, text=json.dumps({"n": 3})),
        record(3, "write_file", {"name": "b.txt", "text": "2"}, ok=False),  # changed nothing
        record(4, "write_file", {"name": "c.txt", "text": "3"}),
        record(5, "echo", {"text": "no cleanup"}),
    ]
    owed = cleanup_calls(spec, calls)
    assert [(c.call_turn, c.spec.cleanup_func, c.arguments) for c in owed] == [
        (4, "tests.undo", {"name": "c.txt"}),
        (2, "echo", {"text": 3}),
        (1, "tests.undo", {"name": "a.txt"}),
    ]


def test_an_argument_path_that_does_not_fit_the_call_names_the_task_cleanup_and_turn() -> None:
    spec = task([{**UNDO_WRITE, "cleanup_args": {"name": "$path"}}])
    with pytest.raises(
        SpecError, match=r"task t: cleanups\[0\]\.cleanup_args: does not fit the call of turn 1"
    ):
        cleanup_calls(spec, [record(1, "write_file", {"name": "a.txt", "text": "1"})])


def write_then_answer(task: Any, conversation: str) -> str:
    if "<tool_response>" not in conversation.split(task.instruction)[-1]:
        call = {"name": "edge__write_file", "arguments": {"name": "a.txt", "text": "made by the agent"}}
        return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"
    return "done"


async def test_the_pipeline_calls_the_cleanup_tool_then_the_cleanup_hook_before_the_reset(
    tmp_path: Path, tokenizer: Any
) -> None:
    servers = tmp_path / "servers.json"
    servers.write_text(
        json.dumps({"edge": {"stdio": {"command": sys.executable, "args": [str(EDGE_SERVER)]}}})
    )
    spec = task(
        [
            {
                "server": "edge",
                "tool": "write_file",
                "cleanup_func": "write_file",  # the server's own tool: rewrites the file
                "cleanup_args": {"name": "$name", "text": "undone by the cleanup tool"},
            },
            {
                **UNDO_WRITE,
                "cleanup_args": {"name": "$name", "note": "$return -> get(content) -> array(0) -> get(text)"},
            },
        ]
    )
    undo.SEEN.clear()
    hooks = ("tests.hooks.undo",)
    pool = EnvPool(make_backend("local", tmp_path / "envs"), run_id(), max_live=1, hook_modules=hooks)
    async with McpGateway.running() as gateway:
        pipeline = RolloutPipeline(
            pool=pool,
            gateway=gateway,
            evaluator=Evaluator(hooks),
            env_config_for=env_config_resolver(load_server_registry(servers)),
            engine_for=lambda t: ScriptedEngine(tokenizer, write_then_answer, t),
            recorder_factory=lambda: ChatRecorder(tokenizer),
            acquire_workers=1,
            run_workers=1,
            eval_workers=1,
            hook_modules=hooks,
        )
        with anyio.fail_after(60):
            (group,) = await pipeline.collect(
                [spec], 1, SamplingConfig(temperature=0.0), EpisodeLimits(max_context_tokens=4096)
            )
    await pool.shutdown()
    (episode,) = group.trajectories
    assert episode.succeeded and [c.name for c in episode.tool_calls] == ["edge__write_file"]
    # the cleanup tool ran first (the hook reads its file), with the call's own arguments and result
    assert undo.SEEN == [
        {
            "task": "t",
            "name": "a.txt",
            "note": "wrote 17 characters to a.txt",
            "file": "undone by the cleanup tool",
        }
    ]
    assert pipeline.metrics.tool_cleanups == 1 and pipeline.metrics.cleanup_failures == 0
