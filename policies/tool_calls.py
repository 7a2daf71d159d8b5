"""Read a tool call out of a model turn written in the Hermes format (see ``policies.chat``).

``parse_tool_call(text)`` is pure and never raises on model output. It returns:

- ``None`` when the turn contains no ``<tool_call>`` tag: the turn is a final answer;
- a ``ToolCall`` for ``<tool_call>{"name": "x", "arguments": {...}}</tool_call>``;
- a ``ToolCallParseError`` value whose ``message`` is written for the model to read and fix its
  call (it goes back as an ``error (parse_error)`` tool result, see ``as_result``).

Tolerated, because small models do it and the intent is unambiguous: whitespace and newlines
around the JSON, a missing closing tag at the end of the text (generation stopped at eos right
after the object), a Markdown code fence around the JSON, raw newlines inside JSON strings,
``arguments`` given as a JSON-encoded string, ``parameters`` instead of ``arguments``, no
``arguments`` at all (a tool without parameters), and prose before or after the call.
Refused: anything that is not exactly one JSON object with a string ``name`` and an object of
arguments, and more than one call in a turn.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from policies.chat import TOOL_CALL_CLOSE, TOOL_CALL_OPEN
from policies.types import ToolCall, ToolResult

_EXPECTED = 'expected <tool_call>{"name": "<tool name>", "arguments": {...}}</tool_call>'


class ToolCallParseError(msgspec.Struct, frozen=True, kw_only=True):
    """A turn that tried to call a tool and got the syntax wrong."""

    message: str
    """What is wrong and what was expected, addressed to the model."""
    raw: str
    """The text inside the ``<tool_call>`` tag (or the whole turn), for logs."""

    def as_result(self) -> ToolResult:
        """The observation the agent loop sends back instead of calling a tool."""
        return ToolResult(text=self.message, is_error=True, error_kind="parse_error")


def _error(message: str, raw: str) -> ToolCallParseError:
    return ToolCallParseError(message=f"{message}; {_EXPECTED}", raw=raw)


def _strip_code_fence(body: str) -> str:
    if body.startswith("```") and body.endswith("```") and len(body) >= 6:
        inner = body[3:-3]
        first_line, _, rest = inner.partition("\n")
        # ```json\n{...}\n``` -> drop the language tag; ```{...}``` has none.
        return (rest if first_line.strip().isalpha() else inner).strip()
    return body


def _decode_object(body: str) -> tuple[Any, str | None]:
    """The JSON value in ``body`` (which must hold nothing else), or an error message."""
    try:
        # strict=False accepts raw newlines and tabs inside strings (code in arguments).
        value, end = json.JSONDecoder(strict=False).raw_decode(body)
    except json.JSONDecodeError as exc:
        return None, f"tool call is not valid JSON: {exc}"
    trailing = body[end:].strip()
    if trailing:
        return None, f"unexpected text after the JSON object of the tool call: {trailing[:40]!r}"
    return value, None


def _arguments(payload: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    arguments = payload.get("arguments", payload.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments, strict=False) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            return None, f"'arguments' is a string that is not valid JSON: {exc}"
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return None, f"arguments must be an object, got {type(arguments).__name__}"
    return arguments, None


def parse_tool_call(text: str) -> ToolCall | ToolCallParseError | None:
    """The tool call in one model turn; ``None`` for a final answer (see the module docstring)."""
    start = text.find(TOOL_CALL_OPEN)
    if start < 0:
        return None
    after = text[start + len(TOOL_CALL_OPEN) :]
    if TOOL_CALL_OPEN in after:
        return _error("more than one tool call in one turn; call one tool, then wait for its result", text)
    end = after.find(TOOL_CALL_CLOSE)
    # No closing tag: the turn ended (eos) right after the call; take the rest of the text.
    body = (after if end < 0 else after[:end]).strip()
    body = _strip_code_fence(body)
    if not body:
        return _error("empty tool call", body)

    payload, message = _decode_object(body)
    if message is not None:
        return _error(message, body)
    if not isinstance(payload, dict):
        return _error(f"tool call must be a JSON object, got {type(payload).__name__}", body)
    if "name" not in payload:
        return _error("tool call is missing 'name'", body)
    name = payload["name"]
    if not isinstance(name, str) or not name.strip():
        return _error(f"'name' must be a non-empty string, got {name!r}", body)
    arguments, message = _arguments(payload)
    if message is not None or arguments is None:
        return _error(message or "arguments must be an object", body)
    return ToolCall(name=name.strip(), arguments=arguments)
