"""Tool routing: find an environment's tools by what the agent wants to do (BM25 over tool text).

MCPDisCo's action space has a *Route* action that retrieves relevant servers/tools before
*Execute*; the hybrid GUI-MCP agent shows only the BM25 top-k tools in the system prompt each step.
This module is the pure part of both (no MCP, no Ray):

- ``ToolRouter(tools)`` indexes the tools the gateway pinned for an episode: server name, tool name
  split into words (``_``, ``-``, camelCase), description, and parameter names and descriptions.
  Tokenisation is deterministic: lowercase words, a small stopword list, plural ``s`` stripped.
- ``ROUTE_TOOL`` is the built-in ``route`` tool; the gateway lists it next to (or instead of) the
  server tools and answers a call to it itself, with no MCP server involved, from
  ``route_answer(router, arguments)``: the hit names, best first (``ToolResult.route_hits``), each
  with its ``name(args?): description`` line of the observation (``RouteAnswer.text``). It never
  raises: bad arguments come back as a message for the model.
- ``visible_tools(router, query, k)`` is the "top-k tools" option: the tools to list in the system
  prompt for a query. The gateway computes it once per episode, for the task instruction (a
  re-retrieval every turn would rewrite the prompt mid-episode).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import bm25s
import msgspec
import numpy as np

from policies.types import ToolSpec

ROUTE_K_MAX = 20
DESCRIPTION_CHARS = 200
_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_STOPWORDS = frozenset(
    "a an and are as at be by can do for from get given how i in into is it me my of on or please "
    "show that the this to use using want what which will with you your".split()
)

ROUTE_TOOL = ToolSpec(
    name="route",
    server="mcprl",
    tool="route",
    description=(
        "Find tools by what you want to do. Give a short query (e.g. 'multiply two numbers' or "
        "'list recent git commits'); returns the best-matching tools, best first, one per line as "
        "'<tool name>(<arguments>): <description>'. Then call the tool you need by its name."
    ),
    parameters={
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What you want to do, in a few words."},
            "k": {
                "type": "integer",
                "minimum": 1,
                "maximum": ROUTE_K_MAX,
                "default": 5,
                "description": "How many tools to return.",
            },
        },
        "required": ["query"],
    },
    read_only=True,
)


def tokenize(text: str) -> list[str]:
    """Lowercase words (camelCase and ``snake_case`` split), stopwords dropped, plural ``s`` cut."""
    words = []
    for word in _WORD.findall(text):
        word = word.lower()
        if word in _STOPWORDS:
            continue
        if len(word) > 3 and word.endswith("ies"):
            word = word[:-3] + "y"
        elif len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
            word = word[:-1]
        words.append(word)
    return words


def tool_text(tool: ToolSpec) -> str:
    """The text a tool is indexed by: server, tool name, description, parameter names and docs."""
    parts = [tool.server, tool.tool, tool.description]
    properties = tool.parameters.get("properties") if isinstance(tool.parameters, dict) else None
    if isinstance(properties, dict):
        for name, schema in properties.items():
            parts.append(str(name))
            if isinstance(schema, dict) and isinstance(schema.get("description"), str):
                parts.append(schema["description"])
    return " ".join(parts)


class ToolRouter:
    """A BM25 index over a fixed set of tools (one environment's pinned tools)."""

    def __init__(self, tools: Sequence[ToolSpec]) -> None:
        self.tools: list[ToolSpec] = list(tools)
        self._bm25: bm25s.BM25 | None = None
        if self.tools:
            self._bm25 = bm25s.BM25()
            self._bm25.index([tokenize(tool_text(t)) for t in self.tools], show_progress=False)

    def search(self, query: str, k: int) -> list[tuple[ToolSpec, float]]:
        """Up to ``k`` tools with a positive score, best first, ties by name; [] for a blank query."""
        if self._bm25 is None or k <= 0 or not isinstance(query, str):
            return []
        vocab = self._bm25.vocab_dict
        ids = [vocab[w] for w in dict.fromkeys(tokenize(query)) if w in vocab]
        if not ids:
            return []
        scores = np.asarray(self._bm25.get_scores(ids), dtype=np.float64)
        ranked = sorted(
            ((round(float(s), 6), t) for s, t in zip(scores, self.tools, strict=True) if s > 0),
            key=lambda pair: (-pair[0], pair[1].name),
        )
        return [(tool, score) for score, tool in ranked[:k]]


def one_line(text: str, limit: int = DESCRIPTION_CHARS) -> str:
    text = " ".join(text.split()) or "(no description)"
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


class RouteAnswer(msgspec.Struct, frozen=True, kw_only=True):
    """What a ``route`` call answers: the hits, best first, each with its line; or a message."""

    hits: tuple[str, ...] = ()
    """Namespaced names of the tools found, best first."""
    lines: tuple[str, ...] = ()
    """One ``<tool name>(<arguments>): <description>`` line per hit, in the order of ``hits``."""
    message: str | None = None
    """Why nothing was found (bad arguments, no match, no tools); ``None`` when there are hits."""

    @property
    def text(self) -> str:
        """The observation: the hit lines, or the message."""
        return self.message if self.message is not None else "\n".join(self.lines)


def route_answer(router: ToolRouter, arguments: object) -> RouteAnswer:
    """The answer to a ``route`` call; never raises (bad arguments are a message for the model)."""
    if not isinstance(arguments, Mapping):
        return RouteAnswer(message='route: arguments must be a JSON object like {"query": "...", "k": 5}.')
    unknown = sorted(set(arguments) - {"query", "k"})
    if unknown:
        return RouteAnswer(
            message=f"route: unknown argument(s) {', '.join(map(repr, unknown))}; it takes 'query' and 'k'."
        )
    query, k = arguments.get("query"), arguments.get("k", 5)
    if query is None:
        return RouteAnswer(
            message="route: missing required argument 'query' (what you want to do, in a few words)."
        )
    if not isinstance(query, str) or not query.strip():
        return RouteAnswer(
            message="route: 'query' must be a non-empty string describing what you want to do."
        )
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= ROUTE_K_MAX:
        return RouteAnswer(message=f"route: 'k' must be an integer from 1 to {ROUTE_K_MAX}, got {k!r}.")
    if not router.tools:
        return RouteAnswer(message="route: no tools are available in this environment.")
    hits = router.search(query, k)
    if not hits:
        servers = ", ".join(sorted({t.server for t in router.tools}))
        return RouteAnswer(
            message=f"route: no tools match {query!r}. Try other words; servers available: {servers}."
        )
    return RouteAnswer(
        hits=tuple(tool.name for tool, _ in hits),
        lines=tuple(f"{tool.name}({signature(tool)}): {one_line(tool.description)}" for tool, _ in hits),
    )


def signature(tool: ToolSpec) -> str:
    """The tool's arguments as ``a, b?`` (``?``: optional), so a routed tool can be called at once."""
    schema = tool.parameters or {}
    required = set(schema.get("required") or ())
    return ", ".join(n if n in required else f"{n}?" for n in (schema.get("properties") or {}))


def visible_tools(
    router: ToolRouter, query: str, k: int, always: Sequence[str] = ("route",)
) -> list[ToolSpec]:
    """The tools to show for ``query``: the ``always`` tools first (``route`` is ``ROUTE_TOOL``,
    other names are looked up in the router; unknown ones skipped), then the top-``k`` retrieved."""
    by_name = {t.name: t for t in router.tools}
    by_name.setdefault(ROUTE_TOOL.name, ROUTE_TOOL)
    shown = {name: by_name[name] for name in always if name in by_name}
    for tool, _ in router.search(query, k):
        shown.setdefault(tool.name, tool)
    return list(shown.values())
