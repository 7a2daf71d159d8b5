"""ToolRouter (BM25 over tool text), the built-in ``route`` tool and top-k tool visibility."""

from __future__ import annotations

from typing import Any

import pytest

from actors.mcp_results import route_parts
from actors.tool_router import (
    ROUTE_TOOL,
    RouteAnswer,
    ToolRouter,
    one_line,
    route_answer,
    tokenize,
    visible_tools,
)
from policies.types import ToolSpec


def _tool(server: str, tool: str, description: str, **params: str) -> ToolSpec:
    return ToolSpec(
        name=f"{server}__{tool}",
        server=server,
        tool=tool,
        description=description,
        parameters={
            "type": "object",
            "properties": {p: {"type": "string", "description": d} for p, d in params.items()},
            "required": list(params),
        },
    )


INVENTORY = [
    _tool("calculator", "add", "Add two numbers and return their sum.", a="First addend", b="Second addend"),
    _tool("calculator", "subtract", "Subtract b from a.", a="Minuend", b="Subtrahend"),
    _tool("calculator", "multiply", "Multiply two numbers (a times b) and return the product.", a="x", b="y"),
    _tool("calculator", "divide", "Divide a by b; errors when b is zero.", a="Dividend", b="Divisor"),
    _tool("weather", "getCurrentWeather", "Current weather conditions for a city.", city="City name"),
    _tool(
        "weather",
        "get_forecast",
        "Weather forecast for the next days: temperature, rain and wind.",
        city="City name",
        days="Number of days ahead (1 = tomorrow)",
    ),
    _tool("weather", "weather-alerts", "Active severe weather alerts for a region.", region="Region code"),
    _tool("git", "git_log", "Show the commit history (most recent commits first).", max_count="How many"),
    _tool("git", "git_status", "Show the working tree status: staged and unstaged changes."),
    _tool(
        "git", "git_diff", "Show changes between the working tree and a commit.", target="Commit or branch"
    ),
    _tool("git", "git_checkout", "Switch branches or restore working tree files.", branch="Branch name"),
    _tool(
        "filesystem", "read_file", "Read the complete contents of a file as text.", path="Path to the file"
    ),
    _tool(
        "filesystem",
        "write_file",
        "Create or overwrite a file with new content.",
        path="Path",
        content="Text",
    ),
    _tool("filesystem", "list_directory", "List the files and folders in a directory.", path="Directory"),
    _tool(
        "filesystem",
        "search_files",
        "Recursively search for files whose names match a pattern.",
        pattern="Glob",
    ),
]


@pytest.fixture(scope="module")
def router() -> ToolRouter:
    return ToolRouter(INVENTORY)


@pytest.mark.parametrize(
    "query, best",
    [
        ("what is 17 times 23", "calculator__multiply"),
        ("forecast for tomorrow in Paris", "weather__get_forecast"),
        ("show recent commits", "git__git_log"),
        ("read a file", "filesystem__read_file"),
        ("current weather in Berlin", "weather__getCurrentWeather"),
        ("divide 10 by 4", "calculator__divide"),
        ("list the folders in a directory", "filesystem__list_directory"),
    ],
)
def test_right_tool_ranks_first(router: ToolRouter, query: str, best: str) -> None:
    hits = router.search(query, 3)
    assert hits and hits[0][0].name == best and hits[0][1] > (hits[1][1] if len(hits) > 1 else 0), [
        (t.name, s) for t, s in hits
    ]
    scores = [s for _, s in hits]
    assert scores == sorted(scores, reverse=True) and all(s > 0 for s in scores)


def test_tokenize_splits_names_and_drops_stopwords() -> None:
    assert tokenize("getCurrentWeather") == ["current", "weather"]
    assert tokenize("git_log weather-alerts HTTPRequest") == [
        "git",
        "log",
        "weather",
        "alert",
        "http",
        "request",
    ]
    assert tokenize("Show the files in directories") == ["file", "directory"]


def test_deterministic_and_ties_by_name() -> None:
    a = [(t.name, s) for t, s in ToolRouter(INVENTORY).search("file path", 10)]
    b = [(t.name, s) for t, s in ToolRouter(list(reversed(INVENTORY))).search("file path", 10)]
    assert a == b
    twins = [_tool("s", name, "same words here") for name in ("zeta", "alpha", "mid")]
    assert [t.name for t, _ in ToolRouter(twins).search("same words", 5)] == ["s__alpha", "s__mid", "s__zeta"]


def test_k_clipping_blank_and_no_match(router: ToolRouter) -> None:
    assert len(router.search("file", 2)) == 2
    everything = router.search("weather file commit number", 100)
    assert 0 < len(everything) <= len(INVENTORY)
    assert router.search("file", 0) == [] and router.search("file", -3) == []
    assert router.search("", 5) == [] and router.search("   ", 5) == [] and router.search("the of", 5) == []
    assert router.search("zyzzyva quux", 5) == []


def test_zero_tools() -> None:
    empty = ToolRouter([])
    assert empty.search("anything", 5) == []
    assert (
        route_answer(empty, {"query": "anything"}).text
        == "route: no tools are available in this environment."
    )
    assert visible_tools(empty, "anything", 3) == [ROUTE_TOOL]


def test_route_tool_spec() -> None:
    assert (ROUTE_TOOL.name, ROUTE_TOOL.server, ROUTE_TOOL.tool, ROUTE_TOOL.read_only) == (
        "route",
        "mcprl",
        "route",
        True,
    )
    assert ROUTE_TOOL.description.startswith("Find tools by what you want to do")
    props = ROUTE_TOOL.parameters["properties"]
    assert ROUTE_TOOL.parameters["required"] == ["query"] and props["query"]["type"] == "string"
    assert (props["k"]["type"], props["k"]["minimum"], props["k"]["maximum"], props["k"]["default"]) == (
        "integer",
        1,
        20,
        5,
    )


def test_route_observation_format(router: ToolRouter) -> None:
    assert route_answer(router, {"query": "show recent commits", "k": 2}).text == (
        "git__git_log(max_count): Show the commit history (most recent commits first).\n"
        "git__git_diff(target): Show changes between the working tree and a commit."
    )
    assert len(route_answer(router, {"query": "weather"}).text.splitlines()) == 3  # only 3 weather tools
    long = ToolRouter([_tool("s", "t", "word " * 100 + "\nsecond line")])
    (line,) = route_answer(long, {"query": "word"}).text.splitlines()
    assert (
        line.startswith("s__t(): word word") and line.endswith("...") and len(line) == len("s__t(): ") + 200
    )
    assert one_line("  two\n lines ") == "two lines" and one_line("") == "(no description)"


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({}, "route: missing required argument 'query' (what you want to do, in a few words)."),
        ({"query": "  "}, "route: 'query' must be a non-empty string describing what you want to do."),
        ({"query": 3}, "route: 'query' must be a non-empty string describing what you want to do."),
        ({"query": "file", "k": 0}, "route: 'k' must be an integer from 1 to 20, got 0."),
        ({"query": "file", "k": 21}, "route: 'k' must be an integer from 1 to 20, got 21."),
        ({"query": "file", "k": "3"}, "route: 'k' must be an integer from 1 to 20, got '3'."),
        ({"query": "file", "k": True}, "route: 'k' must be an integer from 1 to 20, got True."),
        ({"query": "file", "top": 3}, "route: unknown argument(s) 'top'; it takes 'query' and 'k'."),
        (["file"], 'route: arguments must be a JSON object like {"query": "...", "k": 5}.'),
        (
            {"query": "zyzzyva"},
            "route: no tools match 'zyzzyva'. Try other words; servers available: "
            "calculator, filesystem, git, weather.",
        ),
    ],
)
def test_route_observation_bad_arguments(router: ToolRouter, arguments: Any, message: str) -> None:
    assert route_answer(router, arguments).text == message
    assert route_answer(router, arguments) == RouteAnswer(message=message)  # no hits


def test_the_route_answer_names_the_tools_its_observation_lists_best_first(router: ToolRouter) -> None:
    answer = route_answer(router, {"query": "weather forecast for a city", "k": 4})
    assert answer.message is None and len(answer.hits) == 3
    assert answer.hits == tuple(line.split("(", 1)[0] for line in answer.text.splitlines())
    assert answer.hits == tuple(t.name for t, _ in router.search("weather forecast for a city", 4))


def test_a_route_answer_cut_to_the_output_limit_keeps_whole_lines_and_only_their_hits(
    router: ToolRouter,
) -> None:
    answer = route_answer(router, {"query": "show file commit weather", "k": 20})
    full, hits = route_parts(answer, 10_000, (), ())
    assert hits == answer.hits and full.text == answer.text and full.cuts == ()
    limit = len(answer.lines[0]) + 1 + len(answer.lines[1]) + 5  # two lines and a bit of the third
    cut, kept = route_parts(answer, limit, (), ())
    listed = cut.text.splitlines()
    assert kept == answer.hits[:2] and listed[:2] == list(answer.lines[:2])
    assert listed[2] == f"[... {len(answer.lines) - 2} more lines cut: output limit {limit}]"
    (record,) = cut.cuts
    assert (record.part, record.original_bytes) == ("text", len(answer.text.encode()))
    assert record.kept_bytes == len("\n".join(answer.lines[:2]).encode())
    nothing, none_kept = route_parts(answer, 3, (), ())
    assert none_kept == () and nothing.text.startswith("[... ")


def test_visible_tools(router: ToolRouter) -> None:
    names = [t.name for t in visible_tools(router, "weather forecast for tomorrow", 2)]
    assert names == ["route", "weather__get_forecast", "weather__getCurrentWeather"]
    assert visible_tools(router, "read a file", 2) == visible_tools(router, "read a file", 2)
    assert [t.name for t in visible_tools(router, "", 5)] == ["route"]
    pinned = visible_tools(router, "read a file", 1, always=("git__git_status", "nope"))
    assert [t.name for t in pinned] == ["git__git_status", "filesystem__read_file"]
    assert visible_tools(router, "read a file", 1, always=())[0].name == "filesystem__read_file"
