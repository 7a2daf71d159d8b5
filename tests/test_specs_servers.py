"""Server registry: MCP-Universe server lists load as they are; templates fill at launch, secrets stay out."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from specs.env import ListenAddress
from specs.errors import SpecError, SpecErrors
from specs.servers import load_server_registry

DATA = Path(__file__).parent / "data" / "specs"


def test_an_mcp_universe_server_list_loads_as_it_is() -> None:
    registry = load_server_registry(DATA / "mcpuniverse_server_list.json")
    assert registry.names() == sorted(
        ["weather", "google-search", "filesystem", "notion", "calculator", "markitdown", "remote-docs"]
    )
    weather = registry.entry("weather")
    assert weather.sse is not None and weather.sse.args[-1] == "{{PORT}}"
    assert registry.entry("markitdown").stdio is not None and registry.entry("markitdown").stdio.args == ()
    remote = registry.entry("remote-docs")
    assert remote.http_url == "https://docs.example.com/mcp" and remote.stdio is None
    assert remote.variables() == ["DOCS_TOKEN"]


def test_python_resolves_to_the_running_interpreter() -> None:
    launch = load_server_registry(DATA / "mcpuniverse_server_list.json").launch("calculator", environ={})
    assert launch.command == sys.executable
    assert launch.args == ("-m", "mcp_server_calculator")
    assert launch.env == {}


def test_a_relative_command_path_resolves_against_the_working_directory(tmp_path: Path) -> None:
    path = tmp_path / "servers.json"
    path.write_text(
        json.dumps({"s": {"stdio": {"command": ".cache/servers/s/bin/python", "args": ["-m", "s"]}}})
    )
    launch = load_server_registry(path).launch("s", environ={})
    assert launch.command == os.path.abspath(".cache/servers/s/bin/python")


def test_templates_fill_from_the_environment_in_env_values_and_args() -> None:
    registry = load_server_registry(DATA / "mcpuniverse_server_list.json")
    notion = registry.launch("notion", environ={"NOTION_API_KEY": "sekret-123"})
    assert json.loads(notion.env["OPENAPI_MCP_HEADERS"])["Authorization"] == "Bearer sekret-123"
    fs = registry.launch("filesystem", environ={"FILESYSTEM_DIRECTORY": "/data"})  # `{{ VAR }}` Jinja spacing
    assert fs.args[-1] == "/data"


def test_a_filled_secret_never_shows_in_repr() -> None:
    registry = load_server_registry(DATA / "mcpuniverse_server_list.json")
    launch = registry.launch("google-search", environ={"SERP_API_KEY": "sekret-123"})
    assert launch.env == {"SERP_API_KEY": "sekret-123"}
    assert "sekret-123" not in repr(launch)
    assert "sekret-123" not in repr(registry) + repr(registry.entry("google-search"))


def test_a_missing_variable_names_the_variable_the_server_and_the_file() -> None:
    path = DATA / "mcpuniverse_server_list.json"
    with pytest.raises(SpecError) as info:
        load_server_registry(path).launch("google-search", environ={"OTHER": "x"})
    err = info.value
    assert err.file == str(path)
    assert "SERP_API_KEY" in err.message and "'google-search'" in err.message
    assert err.where == "server 'google-search'.env.SERP_API_KEY"


def test_an_empty_variable_counts_as_missing() -> None:
    with pytest.raises(SpecError, match="SERP_API_KEY is not set"):
        load_server_registry(DATA / "mcpuniverse_server_list.json").launch(
            "google-search", environ={"SERP_API_KEY": ""}
        )


def test_an_unknown_server_lists_the_known_names() -> None:
    with pytest.raises(SpecError) as info:
        load_server_registry(DATA / "mcpuniverse_server_list.json").launch("weathr")
    assert "unknown MCP server" in info.value.message
    assert "calculator, filesystem, google-search" in info.value.message


def test_a_server_without_stdio_is_reached_over_http_with_its_templates_filled_and_kept_secret() -> None:
    launch = load_server_registry(DATA / "mcpuniverse_server_list.json").launch(
        "remote-docs", environ={"DOCS_TOKEN": "t0ken-value"}
    )
    assert (launch.transport, launch.command) == ("http", "")
    assert "t0ken-value" in "".join(launch.headers.values()) and launch.secrets == ("t0ken-value",)
    assert "t0ken-value" not in repr(launch)


def test_an_sse_only_server_leaves_its_port_to_the_gateway_and_it_is_not_a_secret(tmp_path: Path) -> None:
    path = tmp_path / "servers.json"
    path.write_text(
        json.dumps({"s": {"sse": {"command": "python3", "args": ["-m", "srv", "--port", "{{PORT}}"]}}})
    )
    launch = load_server_registry(path).launch("s", environ={})
    assert launch.transport == "sse" and launch.listens and launch.args[-1] == "{{PORT}}"
    assert launch.url == "http://{{HOST}}:{{PORT}}/sse" and launch.secrets == ()
    there = launch.listening_at(ListenAddress(bind="0.0.0.0", port=8001, reach="10.0.0.7"))
    assert (there.args[-1], there.url) == ("8001", "http://10.0.0.7:8001/sse")


def test_a_streamable_http_command_listens_in_the_env_and_comes_after_stdio(tmp_path: Path) -> None:
    path = tmp_path / "servers.json"
    listener = {"command": "srv", "args": ["--host", "{{HOST}}", "--port", "{{PORT}}"], "path": "/rpc"}
    stdio = {"command": "srv", "args": ["--stdio"]}
    path.write_text(
        json.dumps(
            {
                "http": {"streamable_http": listener, "http_url": "https://elsewhere/mcp", "sse": stdio},
                "both": {"streamable_http": listener, "stdio": stdio},
            }
        )
    )
    registry = load_server_registry(path)
    http = registry.launch("http", environ={})
    assert (http.transport, http.listens, http.url) == ("http", True, "http://{{HOST}}:{{PORT}}/rpc")
    local = http.listening_at(ListenAddress(bind="127.0.0.1", port=5000, reach="127.0.0.1"))
    assert (
        local.args == ("--host", "127.0.0.1", "--port", "5000") and local.url == "http://127.0.0.1:5000/rpc"
    )
    assert registry.launch("both", environ={}).transport == "stdio"  # stdio first, as for sse
    path.write_text(json.dumps({"bad": {"streamable_http": {"command": "srv", "port": 1}}}))
    with pytest.raises(SpecError, match=r"server 'bad'.streamable_http.*port"):
        load_server_registry(path)


def test_keep_alive_marks_a_stdio_server_only_and_must_be_a_boolean(tmp_path: Path) -> None:
    path = tmp_path / "servers.json"
    stdio, sse = {"command": "python3", "args": ["-m", "srv"]}, {"command": "srv", "args": ["{{PORT}}"]}
    path.write_text(
        json.dumps({"a": {"stdio": stdio, "keep_alive": True}, "b": {"sse": sse, "keep_alive": True}})
    )
    registry = load_server_registry(path)
    assert registry.launch("a", environ={}).keep_alive  # the reset spares it, the gateway parks it
    assert not registry.launch("b", environ={}).keep_alive  # an sse listener is the gateway's own process
    path.write_text(json.dumps({"a": {"stdio": stdio, "keep_alive": "yes"}}))
    with pytest.raises(SpecError, match=r"server 'a'.keep_alive.*bool"):
        load_server_registry(path)


def test_malformed_entries_are_all_reported(tmp_path: Path) -> None:
    path = tmp_path / "servers.json"
    path.write_text(
        json.dumps(
            {
                "a": {"stdio": {"command": "x"}, "transport": "stdio"},
                "b": {"stdio": {"args": ["-m", "b"]}},
                "c": {"env": {"K": "v"}},
                "ok": {"stdio": {"command": "ok"}},
            }
        )
    )
    with pytest.raises(SpecErrors) as info:
        load_server_registry(path)
    wheres = [p.where for p in info.value.problems]
    assert wheres == ["server 'a'.transport", "server 'b'.stdio", "server 'c'"]
    assert (
        "accepted fields: stdio, sse, streamable_http, http_url, headers, env, keep_alive"
        in info.value.problems[0].message
    )
    assert "missing required field `command`" in info.value.problems[1].message
