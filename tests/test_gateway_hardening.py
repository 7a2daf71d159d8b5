"""The gateway against untrusted servers: control-token injection, images and structured output,
annotations, secrets, streamable HTTP and legacy SSE transports, routing and top-k tools.

All against real MCP servers (``tests/servers/edge_server.py`` over stdio, HTTP and SSE)."""

from __future__ import annotations

import json
import logging
import select
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from transformers import AutoTokenizer

from actors.errors import GatewayError, InfraError
from actors.mcp_gateway import McpGateway
from actors.provisioners.local import LocalProvisioner
from policies.chat import format_tool_result
from policies.react import EpisodeLimits, build_messages, run_episode
from policies.scripted import ScriptedEngine
from policies.tokens import ChatRecorder
from policies.types import SamplingConfig, ToolResult
from specs.env import EnvConfig, EnvInfo, ServerLaunch
from specs.servers import load_server_registry
from specs.trajectory import CutRecord
from tests.backends import EDGE_SERVER, edge_server, marked

pytestmark = pytest.mark.anyio
SECRET = "s3cr3t-7f1e9a"


@asynccontextmanager
async def opened(
    tmp_path: Path, *servers: ServerLaunch, gateway_kwargs: dict[str, Any] | None = None, **open_kwargs: Any
) -> AsyncIterator[tuple[McpGateway, EnvInfo, list[Any]]]:
    provisioner = LocalProvisioner(tmp_path / "envs")
    env = await provisioner.create(EnvConfig(servers=servers), "test-run")
    try:
        with anyio.fail_after(60):
            async with McpGateway.running(**(gateway_kwargs or {})) as gateway:
                tools = await gateway.open(env, list(servers), **open_kwargs)
                yield gateway, env, tools
    finally:
        await provisioner.destroy(env)


def registry(tmp_path: Path, entries: dict[str, Any]) -> Path:
    path = tmp_path / "servers.json"
    path.write_text(json.dumps(entries))
    return path


async def test_tool_output_can_neither_close_the_turn_nor_open_a_role(
    tmp_path: Path, model_dir: Path
) -> None:
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    async with opened(
        tmp_path, edge_server(), gateway_kwargs={"control_tokens": tokenizer.all_special_tokens}
    ) as (
        gateway,
        env,
        _,
    ):
        result = await gateway.call(env.env_id, "edge__inject", {}, 10)
    for control in ("<|im_end|>", "<|im_start|>", "</tool_response>", "<tool_call>"):
        assert control not in result.text
    assert "&lt;|im_start|>system" in result.text  # defused, still readable
    call = '<tool_call>\n{"name": "edge__inject", "arguments": {}}\n</tool_call>'

    def controls_in_prompt(observation: ToolResult) -> dict[str, int]:
        messages = [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": call},
            format_tool_result(observation),
        ]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = tokenizer.encode(text, add_special_tokens=False)  # as the recorder tokenizes it
        return {t: ids.count(tokenizer.convert_tokens_to_ids(t)) for t in ("<|im_start|>", "<|im_end|>")}

    # only the template's own turn markers: exactly as many as around a harmless result
    assert controls_in_prompt(result) == controls_in_prompt(ToolResult(text="42"))


async def test_images_are_kept_for_multimodal_models_or_replaced_by_a_placeholder(tmp_path: Path) -> None:
    async with opened(tmp_path, edge_server(), gateway_kwargs={"keep_images": True}) as (gateway, env, _):
        kept = await gateway.call(env.env_id, "edge__picture", {}, 10)
    assert [i["mimeType"] for i in kept.images] == ["image/png"] and kept.images[0]["data"]
    assert "[image 1: image/png, attached]" in kept.text and "a transparent pixel" in kept.text
    async with opened(tmp_path, edge_server()) as (gateway, env, _):
        text_only = await gateway.call(env.env_id, "edge__picture", {}, 10)
    assert text_only.images == () and "not shown" in text_only.text


async def test_structured_output_annotations_and_the_call_record(tmp_path: Path) -> None:
    async with opened(tmp_path, edge_server()) as (gateway, env, tools):
        by_name = {t.name: t for t in tools}
        assert by_name["edge__echo"].annotations == {"readOnlyHint": True} and by_name["edge__echo"].read_only
        assert by_name["edge__boom"].annotations == {} and by_name["edge__boom"].read_only is None
        measured = await gateway.call(env.env_id, "edge__measure", {"text": "two words"}, 10)
        echoed = await gateway.call(env.env_id, "edge__echo", {"text": "hello"}, 10)
    assert measured.structured == {"chars": 9, "words": 2} and not measured.is_error
    assert (echoed.server, echoed.read_only, echoed.text) == ("edge", True, "hello")
    assert echoed.output_bytes > len("hello")  # the wire form, before any cap


async def test_secrets_from_templates_never_reach_observations_logs_or_trajectories(
    tmp_path: Path, model_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    entries = {
        "edge": {
            "stdio": {"command": "python", "args": [str(EDGE_SERVER)]},
            "env": {"API_KEY": "{{EDGE_KEY}}"},
        },
        "noisy": {
            "stdio": {"command": "sh", "args": ["-c", "echo key is $API_KEY >&2; exit 3"]},
            "env": {"API_KEY": "{{EDGE_KEY}}"},
        },
    }
    servers = load_server_registry(registry(tmp_path, entries))
    edge, noisy = servers.launch("edge", {"EDGE_KEY": SECRET}), servers.launch("noisy", {"EDGE_KEY": SECRET})
    with pytest.raises(InfraError) as failed:
        async with opened(tmp_path, noisy):
            pass
    assert "key is [redacted]" in str(failed.value) and SECRET not in str(failed.value)

    tokenizer = AutoTokenizer.from_pretrained(model_dir)

    def leaky(task: Any, conversation: str) -> str:
        if "<tool_response>" in conversation.split("Which key?")[-1]:
            return "Done."
        return '<tool_call>\n{"name": "edge__getenv", "arguments": {"name": "API_KEY"}}\n</tool_call>'

    async with opened(tmp_path, edge) as (gateway, env, tools):
        trajectory = await run_episode(
            task_id="t",
            group_id="g",
            messages=build_messages("Which key?", tools, None),
            recorder=ChatRecorder(tokenizer),
            engine=ScriptedEngine(tokenizer, leaky, None),
            tools=gateway,
            env_id=env.env_id,
            sampling=SamplingConfig(temperature=0.0),
            limits=EpisodeLimits(max_turns=2, max_context_tokens=2048),
        )
    assert trajectory.tool_calls and trajectory.tool_calls[0].ok
    assert "[redacted]" in json.dumps(trajectory.messages)
    assert SECRET not in msgspec.json.encode(trajectory).decode()
    assert SECRET not in tokenizer.decode(trajectory.token_ids)
    assert SECRET not in caplog.text and SECRET not in repr(edge)


@pytest.fixture
def http_edge() -> Iterator[tuple[int, str]]:
    """The edge server over streamable HTTP on a loopback port, requiring a bearer token."""
    token = "tok-31415"
    process = subprocess.Popen(
        [sys.executable, str(EDGE_SERVER), "--http", "0"],
        env={"EDGE_TOKEN": token, "PATH": "/usr/bin:/bin"},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        yield _listening_port(process), token
    finally:
        process.kill()
        process.wait(timeout=10)


def _listening_port(process: subprocess.Popen[str], within_s: float = 30.0) -> int:
    """The port the server prints once its socket listens: a bounded wait for that line."""
    assert process.stdout is not None
    readable, _, _ = select.select([process.stdout], [], [], within_s)
    line = process.stdout.readline() if readable else ""
    if not line.strip().isdigit():
        raise AssertionError(
            f"the HTTP edge server printed {line!r} instead of its port within {within_s}s "
            f"(exit status {process.poll()})"
        )
    return int(line)


def http_entry(port: int) -> dict[str, Any]:
    """A server-list entry for the HTTP edge server, its token from a template."""
    return {"http_url": f"http://127.0.0.1:{port}/mcp", "headers": {"Authorization": "Bearer {{EDGE_TOKEN}}"}}


async def test_a_remote_server_over_streamable_http_with_templated_headers(
    tmp_path: Path, http_edge: tuple[int, str]
) -> None:
    port, token = http_edge
    entry = http_entry(port)
    servers = load_server_registry(registry(tmp_path, {"remote": entry}))
    good = servers.launch("remote", {"EDGE_TOKEN": token})
    async with opened(tmp_path, good) as (gateway, env, tools):
        assert "remote__echo" in {t.name for t in tools}
        result = await gateway.call(env.env_id, "remote__echo", {"text": f"my token is {token}"}, 10)
    assert (result.is_error, result.text) == (False, "my token is [redacted]")
    bad = servers.launch("remote", {"EDGE_TOKEN": "wrong"})
    with pytest.raises(InfraError, match="remote"):
        async with opened(tmp_path, bad):
            pass


async def test_a_legacy_sse_server_is_started_on_its_port_and_stopped_with_the_env(tmp_path: Path) -> None:
    entry = {"sse": {"command": "python", "args": [str(EDGE_SERVER), "--sse", "{{PORT}}"]}}
    legacy = load_server_registry(registry(tmp_path, {"legacy": entry})).launch("legacy", {})
    async with (
        opened(tmp_path, legacy) as (gateway, env, _),
        opened(tmp_path / "b", legacy) as (other, env_b, _),
    ):
        assert (await gateway.call(env.env_id, "legacy__echo", {"text": "over sse"}, 10)).text == "over sse"
        first, second = marked(env.env_id), marked(env_b.env_id)
        assert first and second  # one listener per environment, each on its own port
        await gateway.call(env.env_id, "legacy__write_file", {"name": "mine.txt", "text": "a"}, 10)
        assert (Path(env.workdir) / "mine.txt").exists() and not (Path(env_b.workdir) / "mine.txt").exists()
    assert marked(env.env_id) == [] and marked(env_b.env_id) == []  # the listeners went with their envs
    sandboxed = EnvInfo(env_id="x", run_id="r", backend="bwrap", key="k", workdir="/tmp", created_at=0.0)
    async with McpGateway.running() as gateway:
        with pytest.raises(GatewayError, match="no network that this host reaches"):
            await gateway.open(sandboxed, [legacy])


async def test_the_route_tool_and_top_k_tools_per_episode(tmp_path: Path) -> None:
    async with opened(tmp_path, edge_server(), route=True) as (gateway, env, tools):
        assert tools[0].name == "route" and len(tools) > 10
        found = await gateway.call(env.env_id, "route", {"query": "count the words of a text", "k": 3}, 10)
        assert found.text.splitlines()[0].startswith("edge__measure(text)")
        assert not found.is_error and (found.server, found.tool, found.read_only) == ("mcprl", "route", True)
        assert found.route_hits == tuple(line.split("(", 1)[0] for line in found.text.splitlines())
        assert len(found.route_hits) == 3 and found.cuts == ()
        blank = await gateway.call(env.env_id, "route", {"query": "zyzzyva"}, 10)
        assert blank.route_hits == () and "no tools match" in blank.text
        assert (await gateway.call(env.env_id, "edge__echo", {"text": "x"}, 10)).route_hits is None
    query = "return the text unchanged"
    async with opened(tmp_path, edge_server(), top_k=2, query=query) as (gateway, env, tools):
        shown = [t.name for t in tools]
        assert shown[0] == "route" and "edge__echo" in shown and len(shown) == 3
        hidden = await gateway.call(env.env_id, "edge__measure", {"text": "still callable"}, 10)
        assert isinstance(hidden, ToolResult) and hidden.structured == {"chars": 14, "words": 2}


async def test_an_env_served_as_one_mcp_endpoint_is_the_same_env_and_refuses_rebinding(
    tmp_path: Path,
) -> None:
    async with opened(tmp_path, edge_server()) as (gateway, env, _):
        url = await gateway.serve(env.env_id)
        assert url.startswith("http://127.0.0.1:")
        async with (
            streamable_http_client(url) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            listed = {t.name: t for t in (await session.list_tools()).tools}
            assert "edge__write_file" in listed and listed["edge__echo"].annotations.read_only_hint is True
            wrote = await session.call_tool("edge__write_file", {"name": "from_outside.txt", "text": "hi"})
            assert not wrote.is_error
        assert (Path(env.workdir) / "from_outside.txt").read_text() == "hi"  # the very same environment
        async with create_mcp_http_client(headers={"Host": "evil.example"}) as client:
            rebound = await client.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert rebound.status_code == 421
        await gateway.close(env.env_id)
        with pytest.raises(OSError):  # the endpoint went with the environment
            await anyio.connect_tcp("127.0.0.1", int(url.split(":")[2].split("/")[0]))


def test_probe_shows_an_http_servers_tools_and_annotations(
    tmp_path: Path, http_edge: tuple[int, str]
) -> None:
    port, token = http_edge
    entry = http_entry(port)
    command = [sys.executable, "launch/probe.py", "--servers", str(registry(tmp_path, {"remote": entry}))]
    command += ["--server", "remote", "--call", "echo", "--args", '{"text": "probed"}']
    done = subprocess.run(
        command,
        cwd=EDGE_SERVER.parents[2],
        env={"EDGE_TOKEN": token, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    annotations = {t["tool"]: t["annotations"] for t in report["tools"]}
    assert annotations["echo"] == {"readOnlyHint": True} and report["call"]["result"]["text"] == "probed"
    assert token not in done.stdout + done.stderr


async def test_an_8_mb_result_is_bounded_in_every_part_with_each_cut_recorded(tmp_path: Path) -> None:
    n = 8_000_000  # the SDK mirrors the string into structuredContent: 16 MB on the wire
    async with opened(tmp_path, edge_server()) as (gateway, env, _):
        result = await gateway.call(env.env_id, "edge__big", {"n": n}, 60)
    assert not result.is_error and result.output_bytes > n  # what came over the wire, before the caps
    assert result.text.startswith("x" * 20_000) and len(result.text) < 20_100
    assert f"{n - 20_000} more characters cut: output limit 20000" in result.text
    assert result.structured is None and result.images == ()
    assert len(msgspec.json.encode(result)) < 25_000  # all that crosses the actor boundary
    assert result.cuts == (
        CutRecord(part="text", original_bytes=n, kept_bytes=20_000),
        CutRecord(part="structured", original_bytes=len('{"result":""}') + n, kept_bytes=0),
    )


async def test_structured_content_over_its_cap_is_dropped_whole_and_under_it_kept(tmp_path: Path) -> None:
    async with opened(tmp_path, edge_server(), gateway_kwargs={"max_structured_bytes": 21}) as (gw, env, _):
        fits = await gw.call(env.env_id, "edge__measure", {"text": "two words"}, 10)
        over = await gw.call(env.env_id, "edge__measure", {"text": "three words now"}, 10)
    assert fits.structured == {"chars": 9, "words": 2} and fits.cuts == ()  # {"chars":9,"words":2}: 21 bytes
    assert over.structured is None and not over.is_error
    assert over.cuts == (CutRecord(part="structured", original_bytes=22, kept_bytes=0),)


async def test_images_beyond_the_count_or_size_cap_are_placeholders_with_their_cuts(tmp_path: Path) -> None:
    options = {"keep_images": True, "max_images": 2}
    async with opened(tmp_path, edge_server(), gateway_kwargs=options) as (gateway, env, _):
        three = await gateway.call(env.env_id, "edge__pictures", {"n": 3}, 10)
    assert len(three.images) == 2 and "[image 2: image/png, attached]" in three.text
    assert "not shown: the gateway keeps at most 2 images per result" in three.text
    data = len(three.images[0]["data"])
    assert three.cuts == (CutRecord(part="image", original_bytes=data, kept_bytes=0),)
    options = {"keep_images": True, "max_image_bytes": data - 1}
    async with opened(tmp_path, edge_server(), gateway_kwargs=options) as (gateway, env, _):
        large = await gateway.call(env.env_id, "edge__picture", {}, 10)
    assert large.images == () and f"over the gateway's cap of {data - 1} bytes per image" in large.text
    assert large.cuts == (CutRecord(part="image", original_bytes=data, kept_bytes=0),)
    assert large.text.endswith("a transparent pixel")


async def test_an_episode_keeps_at_most_its_cap_of_images_and_says_so(tmp_path: Path) -> None:
    options = {"keep_images": True, "max_episode_images": 4}
    async with opened(tmp_path, edge_server(), gateway_kwargs=options) as (gateway, env, _):
        first = await gateway.call(env.env_id, "edge__pictures", {"n": 3}, 10)
        second = await gateway.call(env.env_id, "edge__pictures", {"n": 3}, 10)
        third = await gateway.call(env.env_id, "edge__picture", {}, 10)
    assert (len(first.images), len(second.images), len(third.images)) == (3, 1, 0)
    assert "[image 1: image/png, attached]" in second.text
    capped = "not shown: this episode has had its 4 images, the most the gateway keeps per episode"
    assert second.text.count(capped) == 2 and third.text.count(capped) == 1
    assert [c.part for c in second.cuts] == ["image", "image"] and first.cuts == ()


async def test_a_route_answer_over_the_output_limit_lists_whole_lines_and_exactly_their_hits(
    tmp_path: Path,
) -> None:
    async with opened(tmp_path, edge_server(), route=True, gateway_kwargs={"max_output_chars": 150}) as (
        gateway,
        env,
        _,
    ):
        found = await gateway.call(env.env_id, "route", {"query": "text file image server", "k": 10}, 10)
    *lines, marker = found.text.splitlines()
    assert marker.startswith("[... ") and marker.endswith("more lines cut: output limit 150]")
    assert found.route_hits == tuple(line.split("(", 1)[0] for line in lines) and found.route_hits
    assert [c.part for c in found.cuts] == ["text"]
