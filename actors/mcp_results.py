"""A tool result as the model may see it: MCP result content turned into bounded, safe parts.

Every part of a result is bounded here, inside the gateway, before it crosses an actor boundary,
and each cut is recorded as a ``CutRecord`` (``ToolResult.cuts``):

- text (the observation): text parts joined by newlines, other content as a placeholder that
  says what was left out; secrets redacted, control tokens escaped, then cut to
  ``ResultCaps.max_text_chars`` characters with a marker saying how much was cut;
- ``structuredContent``: kept while its compact JSON encoding is at most
  ``max_structured_bytes``; above that it is dropped whole (``ToolResult.structured`` is
  ``None``, the cut recorded with ``kept_bytes=0``): half a JSON object is no object, and the
  text already carries what the model reads (SDK servers mirror it there);
- images (only with ``keep_images``, for a multimodal model): at most ``max_images`` per result,
  each at most ``max_image_bytes`` of base64 data; one over a cap is dropped with a placeholder in
  the text saying why.

Pure functions of the wire (JSON) form of a result (``model_dump(by_alias=True)``), the same under
``mcp`` 1.x and 2.x.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from typing import Any, TypeAlias

import msgspec

from actors.mcp_wire import escape_controls, redact
from actors.tool_router import RouteAnswer
from policies.types import ToolResult, ToolSpec
from specs.trajectory import CutRecord

Json: TypeAlias = dict[str, "Json"] | list["Json"] | str | int | float | bool | None
"""A JSON value (``structuredContent``)."""
WireResult: TypeAlias = dict[str, Any]
"""A ``CallToolResult`` in its wire (JSON) form: the SDK's dump, not yet checked part by part."""
Image: TypeAlias = dict[str, str]
"""An image kept for a multimodal model: ``{"mimeType", "data"}`` (base64)."""


class ResultCaps(msgspec.Struct, frozen=True, kw_only=True):
    """How much of each part of a result the gateway lets through (``McpGateway`` options)."""

    max_text_chars: int = 20_000
    """Characters of observation text; the rest is cut with a marker."""
    max_structured_bytes: int = 64_000
    """Bytes of ``structuredContent`` as compact UTF-8 JSON; above it, dropped whole."""
    max_image_bytes: int = 1_000_000
    """Bytes of one image's base64 data (about 750 kB decoded); a larger one is dropped."""
    max_images: int = 4
    """Images kept per result; later ones are dropped."""
    keep_images: bool = False
    """Keep images for a multimodal model; otherwise each is a placeholder in the text."""
    max_episode_images: int | None = None
    """Images kept per episode (an environment open in the gateway); later ones are placeholders
    that say the episode's cap is reached. ``None``: no cap but the per-result one."""
    images_left: int | None = None
    """For one call: what the episode's cap leaves (the gateway sets it per call)."""

    def __post_init__(self) -> None:
        for name in ("max_text_chars", "max_structured_bytes", "max_image_bytes", "max_images"):
            if getattr(self, name) < 0:
                raise ValueError(f"McpGateway option {name} must be >= 0, got {getattr(self, name)}")
        if self.max_episode_images is not None and self.max_episode_images < 0:
            raise ValueError(
                f"McpGateway option max_episode_images must be >= 0, got {self.max_episode_images}"
            )


class Parts(msgspec.Struct, frozen=True, kw_only=True):
    """A result's parts, bounded (the text not yet: ``bound_text`` does that for every message)."""

    text: str
    structured: Json = None
    images: tuple[Image, ...] = ()
    cuts: tuple[CutRecord, ...] = ()
    output_bytes: int = 0
    """Size of the result's content as it came over the wire (before any cap)."""
    is_error: bool = False


def result_parts(wire: WireResult, caps: ResultCaps, secrets: tuple[str, ...]) -> Parts:
    """Text, structured content and images of one ``CallToolResult``, each within ``caps``."""
    text, images, cuts = content_text(wire, caps)
    structured, structured_cut = bound_structured(wire.get("structuredContent"), caps, secrets)
    return Parts(
        text=text,
        structured=structured,
        images=images,
        cuts=(*cuts, *structured_cut),
        output_bytes=len(json.dumps(wire.get("content") or []).encode()),
        is_error=bool(wire.get("isError")),
    )


def content_text(wire: WireResult, caps: ResultCaps) -> tuple[str, tuple[Image, ...], list[CutRecord]]:
    """Text parts joined by newlines, other content as a placeholder that says what was left out;
    the images kept (``caps.keep_images``, within the image caps) and the cuts of the others."""
    parts: list[str] = []
    images: list[Image] = []
    cuts: list[CutRecord] = []
    for item in wire.get("content") or []:
        kind = item.get("type")
        if kind == "text":
            parts.append(item.get("text", ""))
        elif kind == "image" and caps.keep_images:
            parts.append(_keep_image(item, caps, images, cuts))
        elif kind in ("image", "audio"):
            size = len(item.get("data", "")) * 3 // 4
            parts.append(
                f"[{kind} content, {item.get('mimeType', 'unknown type')}, ~{size} bytes, not shown]"
            )
        elif kind == "resource_link":
            parts.append(f"[resource link: {item.get('uri', '?')}]")
        elif kind == "resource":
            resource = item.get("resource") or {}
            text = resource.get("text")
            parts.append(
                text if text is not None else f"[binary resource {resource.get('uri', '?')}, not shown]"
            )
        else:
            parts.append(f"[{kind} content, not shown]")
    if not parts and wire.get("structuredContent") is not None:
        parts.append(json.dumps(wire["structuredContent"], ensure_ascii=False))
    return "\n".join(parts), tuple(images), cuts


def _keep_image(item: dict[str, Any], caps: ResultCaps, images: list[Image], cuts: list[CutRecord]) -> str:
    """Keep one image in ``images`` if the caps allow (else record its cut); its text placeholder."""
    mime, data = str(item.get("mimeType", "application/octet-stream")), str(item.get("data", ""))
    if len(data) > caps.max_image_bytes:
        cuts.append(CutRecord(part="image", original_bytes=len(data), kept_bytes=0))
        return (
            f"[image, {mime}, {len(data)} bytes of base64, not shown: over the gateway's cap of "
            f"{caps.max_image_bytes} bytes per image]"
        )
    if len(images) >= caps.max_images:
        cuts.append(CutRecord(part="image", original_bytes=len(data), kept_bytes=0))
        return f"[image, {mime}, not shown: the gateway keeps at most {caps.max_images} images per result]"
    if caps.images_left is not None and len(images) >= caps.images_left:
        cuts.append(CutRecord(part="image", original_bytes=len(data), kept_bytes=0))
        return (
            f"[image, {mime}, not shown: this episode has had its {caps.max_episode_images} images, "
            "the most the gateway keeps per episode]"
        )
    try:
        base64.b64decode(data, validate=True)
    except binascii.Error:
        cuts.append(CutRecord(part="image", original_bytes=len(data), kept_bytes=0))
        return f"[image, {mime}, not shown: its data is not valid base64]"
    images.append({"mimeType": mime, "data": data})
    return f"[image {len(images)}: {mime}, attached]"


def bound_structured(
    structured: Json, caps: ResultCaps, secrets: tuple[str, ...]
) -> tuple[Json, tuple[CutRecord, ...]]:
    """``structuredContent`` with secrets redacted, or ``None`` and its cut when it is over the cap."""
    if structured is None:
        return None, ()
    encoded = json.dumps(structured, ensure_ascii=False, separators=(",", ":"))
    size = len(encoded.encode())
    if size > caps.max_structured_bytes:
        return None, (CutRecord(part="structured", original_bytes=size, kept_bytes=0),)
    if secrets and (redacted := redact(encoded, secrets)) != encoded:
        # through the JSON text: a secret may sit in any nested string
        value: Json = json.loads(redacted)
        return value, ()
    return structured, ()


def bound_text(
    text: str, limit: int, secrets: tuple[str, ...], controls: tuple[str, ...]
) -> tuple[str, tuple[CutRecord, ...]]:
    """``text`` redacted, its control strings escaped and cut to ``limit`` characters (with a marker
    saying how much was cut); the cut, if any."""
    safe = escape_controls(redact(text, secrets), controls)
    if len(safe) <= limit:
        return safe, ()
    kept = safe[:limit]
    cut = CutRecord(part="text", original_bytes=len(text.encode()), kept_bytes=len(kept.encode()))
    return kept + f"\n[... {len(safe) - limit} more characters cut: output limit {limit}]", (cut,)


def bound_lines(
    lines: Sequence[str], limit: int, secrets: tuple[str, ...], controls: tuple[str, ...]
) -> tuple[str, int, tuple[CutRecord, ...]]:
    """Whole lines, each redacted and escaped, while they fit in ``limit`` characters (joined by
    newlines), then a marker saying how many were cut; (text, lines kept, the cut if any). A line
    is never cut in half, so what a reader parses line by line is exactly what was kept."""
    safe = [escape_controls(redact(line, secrets), controls) for line in lines]
    kept, size = 0, -1
    for line in safe:
        if size + 1 + len(line) > limit:
            break
        kept, size = kept + 1, size + 1 + len(line)
    if kept == len(safe):
        return "\n".join(safe), kept, ()
    text = "\n".join(safe[:kept])
    original = len("\n".join(lines).encode())
    marker = f"[... {len(safe) - kept} more lines cut: output limit {limit}]"
    cut = CutRecord(part="text", original_bytes=original, kept_bytes=len(text.encode()))
    return (f"{text}\n{marker}" if text else marker), kept, (cut,)


def route_parts(
    answer: RouteAnswer, limit: int, secrets: tuple[str, ...], controls: tuple[str, ...]
) -> tuple[Parts, tuple[str, ...]]:
    """The bounded observation of a ``route`` answer and its hits: exactly the tools whose lines
    the observation keeps, best first (``()`` when it found none)."""
    if answer.message is not None:
        text, cuts = bound_text(answer.message, limit, secrets, controls)
        return Parts(text=text, cuts=cuts), ()
    text, kept, cuts = bound_lines(answer.lines, limit, secrets, controls)
    return Parts(text=text, cuts=cuts), answer.hits[:kept]


def tool_result(
    parts: Parts,
    spec: ToolSpec | None,
    kind: str | None,
    latency_s: float,
    route_hits: tuple[str, ...] | None = None,
) -> ToolResult:
    """The ``ToolResult`` of bounded ``parts`` with the call's facts: the tool's server, own name
    and read-only hint (``None`` for a name that is no pinned tool), the route hits, every cut."""
    return ToolResult(
        text=parts.text,
        is_error=kind is not None,
        error_kind=kind,
        latency_s=latency_s,
        output_bytes=parts.output_bytes,
        structured=parts.structured,
        images=parts.images,
        server=spec.server if spec else None,
        tool=spec.tool if spec else None,
        read_only=spec.read_only if spec else None,
        route_hits=route_hits,
        cuts=parts.cuts,
    )
