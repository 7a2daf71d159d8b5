"""The MCP wire format, read the same way under ``mcp`` 1.x and 2.x, turned into what the model sees.

Tools and results arrive as pydantic models whose attribute names differ between SDK majors
(``isError`` / ``is_error``); their JSON (``model_dump(by_alias=True)``) does not, so everything
here works on that JSON form. Pure functions: a tool listing entry to a ``ToolSpec``, an argument
check against the tool's input schema (JSON Schema, dialect from ``$schema``), the escaping of
control strings and the redaction of secrets, and short descriptions of SDK errors. Result content
and its caps are in ``actors/mcp_results.py``.
"""

from __future__ import annotations

import logging
from typing import Any

import jsonschema
from jsonschema.protocols import Validator

from policies.types import ToolSpec

try:  # mcp 2.x
    from mcp import MCPError as McpError
except ImportError:  # mcp 1.x
    from mcp import McpError  # type: ignore[attr-defined,no-redef]

logger = logging.getLogger(__name__)

CONNECTION_CLOSED = -32000
"""JSON-RPC error code both SDK majors raise when the transport to the server ended."""
INVALID_PARAMS = -32602


def tool_spec(server: str, tool: dict[str, Any]) -> ToolSpec:
    """A ``tools/list`` entry (wire form) of ``server`` as the model sees it, namespaced."""
    annotations = tool.get("annotations") or {}
    return ToolSpec(
        name=f"{server}__{tool['name']}",
        server=server,
        tool=tool["name"],
        description=tool.get("description") or tool.get("title") or "",
        parameters=tool.get("inputSchema") or {"type": "object"},
        read_only=annotations.get("readOnlyHint"),
        annotations=dict(annotations),
    )


def argument_validator(spec: ToolSpec) -> Validator | None:
    """A JSON-schema validator for the tool's arguments; ``None`` if the server's schema is invalid."""
    try:
        cls = jsonschema.validators.validator_for(spec.parameters)
        cls.check_schema(spec.parameters)
        return cls(spec.parameters)
    except jsonschema.SchemaError as e:
        logger.warning(
            "tool %s has an invalid input schema, arguments go unchecked: %s", spec.name, e.message
        )
        return None


def argument_problem(validator: Validator | None, arguments: dict[str, Any]) -> str | None:
    if validator is None:
        return None
    error = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{error.message}" + (f" (at {where})" if where else "")


DEFAULT_CONTROL_TOKENS = (
    # ChatML (SmolLM2, Qwen), Llama 3, Mistral, Gemma, generic end-of-text
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<|begin_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<start_of_turn>",
    "<end_of_turn>",
    "[INST]",
    "[/INST]",
    "</s>",
    # the tool protocol's own tags (policies/chat.py)
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
)
"""Strings a tool's output must not contain verbatim: the chat templates' turn and role markers
and the tool protocol's tags. The gateway adds the run's tokenizer's special tokens to these."""


def escape_controls(text: str, controls: tuple[str, ...]) -> str:
    """``text`` with every control string defused so that no tokenizer reads it as the control:
    ``<|im_end|>`` becomes ``&lt;|im_end|>``; one that does not start with ``<`` gets a word joiner
    (U+2060) after its first character. Longer controls first, so overlaps are handled."""
    if not controls or not text:
        return text
    for control in sorted(set(controls), key=len, reverse=True):
        if control and control in text:
            safe = "&lt;" + control[1:] if control.startswith("<") else control[0] + "\u2060" + control[1:]
            text = text.replace(control, safe)
    return text


def redact(text: str, secrets: tuple[str, ...]) -> str:
    """``text`` with every secret value replaced by ``[redacted]`` (longest first)."""
    for secret in secrets:
        if secret and secret in text:
            text = text.replace(secret, "[redacted]")
    return text


def error_code(e: BaseException) -> int | None:
    if not isinstance(e, McpError):
        return None
    code = getattr(e, "code", None)  # 2.x
    if code is None:
        code = getattr(getattr(e, "error", None), "code", None)  # 1.x
    return code if isinstance(code, int) else None


def describe(e: BaseException | None) -> str:
    while isinstance(e, BaseExceptionGroup) and len(e.exceptions) == 1:
        e = e.exceptions[0]
    if e is None:
        return "no error"
    message = getattr(e, "message", None) or str(e)
    return f"{type(e).__name__}: {message}" if message else type(e).__name__
