"""The model-facing tool format: tools in the system prompt, calls and results as chat text.

We use the Hermes / Qwen convention, which needs nothing from the chat template but plain
system / user / assistant / tool messages, so it works with any ChatML template (SmolLM2's
template has no notion of tools: it renders whatever ``role`` and ``content`` it is given):

- the system prompt lists the tools, one JSON object per line inside ``<tools></tools>``;
- the model calls a tool by writing ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``,
  at most one per turn (``policies.tool_calls.parse_tool_call`` reads it back);
- a tool's result comes back as a ``tool`` message wrapped in ``<tool_response></tool_response>``,
  with errors marked ``error (<kind>):`` so the model can tell them from output;
- a turn without ``<tool_call>`` is the final answer;
- for a vision-language policy, a result's images are image parts of the message
  (``{"type": "image", "sha256": ...}``) where the gateway's ``[image n: <mime>, attached]``
  markers stood, which its chat template renders as its image placeholder.

Everything here is pure string building; ``format_tool_call`` and ``parse_tool_call`` round-trip.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from policies.types import ToolCall, ToolResult, ToolSpec
from specs.trajectory import ImageRef

TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
TOOL_RESPONSE_OPEN, TOOL_RESPONSE_CLOSE = "<tool_response>", "</tool_response>"
ATTACHED = re.compile(r"\[image (\d+): ([^,\]]*), attached\]")
"""The gateway's marker of an image it kept (``actors.mcp_results``): ``[image 1: image/png, attached]``."""

_TOOLS_INSTRUCTIONS = """\
# Tools

You may call one of the following tools to help with the task. Each tool is described by a \
JSON object inside <tools></tools>, with a JSON schema of its arguments:
<tools>
{tools}
</tools>

To call a tool, write its name and arguments as one JSON object inside <tool_call></tool_call> tags:
<tool_call>
{{"name": "<tool name>", "arguments": {{<arguments as a JSON object>}}}}
</tool_call>
Call at most one tool per turn and stop after the closing tag. The result comes back in the \
next message inside <tool_response></tool_response> tags. When you know the answer, reply with \
the final answer in plain text, without any <tool_call>."""


def _dumps(value: Any) -> str:
    # ensure_ascii=False: the model should read non-ASCII text as text, not as \\u escapes.
    return json.dumps(value, ensure_ascii=False)


def tool_schema(tool: ToolSpec) -> dict[str, Any]:
    """The OpenAI-style function schema of one tool, as listed in the system prompt."""
    parameters = tool.parameters or {"type": "object", "properties": {}}
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": parameters},
    }


def render_system_prompt(base: str, tools: list[ToolSpec]) -> str:
    """``base`` followed by the tool list and the call syntax; just ``base`` when there are no tools."""
    if not tools:
        return base
    listing = "\n".join(_dumps(tool_schema(tool)) for tool in tools)
    block = _TOOLS_INSTRUCTIONS.format(tools=listing)
    return f"{base.rstrip()}\n\n{block}" if base.strip() else block


def format_tool_call(call: ToolCall) -> str:
    """A tool call as the model is taught to write it (for demonstrations and scripted policies)."""
    payload = _dumps({"name": call.name, "arguments": call.arguments})
    return f"{TOOL_CALL_OPEN}\n{payload}\n{TOOL_CALL_CLOSE}"


def format_tool_result(
    result: ToolResult, *, role: str = "tool", images: Sequence[ImageRef] = ()
) -> dict[str, Any]:
    """The chat message that carries a tool's result back to the model.

    ``role`` is ``tool`` by default; pass ``user`` for a chat template that rejects unknown
    roles (the ``<tool_response>`` tags keep the message recognisable either way). ``images``
    (a vision-language policy): the result's images, which become image parts in place of their
    ``[image n: ...]`` markers (after the text when the markers do not match them one to one).
    """
    text = result.text
    if result.is_error:
        text = f"error ({result.error_kind or 'tool_error'}): {text}"
    wrapped = f"{TOOL_RESPONSE_OPEN}\n{text}\n{TOOL_RESPONSE_CLOSE}"
    if not images:
        return {"role": role, "content": wrapped}
    parts = [{"type": "image", "sha256": ref.sha256, "mime_type": ref.mime_type} for ref in images]
    pieces = ATTACHED.split(wrapped)[::3]  # text, (number, mime), text, ...: keep the text
    if len(pieces) - 1 != len(parts):
        return {"role": role, "content": [{"type": "text", "text": wrapped}, *parts]}
    content: list[dict[str, Any]] = []
    for piece, part in zip(pieces, [*parts, None], strict=True):
        if piece:
            content.append({"type": "text", "text": piece})
        if part is not None:
            content.append(part)
    return {"role": role, "content": content}
