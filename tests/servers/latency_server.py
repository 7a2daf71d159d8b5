"""An MCP server (stdio) with one tool whose latency is its argument, for the rollout benchmark.

Run: ``python tests/servers/latency_server.py``. Tool:

- ``sleep(seconds)``: waits ``seconds`` on the event loop (``anyio.sleep``: no CPU, other requests
  are served meanwhile) and returns ``"slept <seconds> s"``. A negative or non-finite value is a
  tool error the model reads, never a crash.

``REGISTRY`` is the server list that names it (MCP-Universe ``server_list.json`` shape), for
``specs.servers.parse_server_registry``: ``python`` resolves to the running interpreter.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer

SERVER_NAME = "latency"
TOOL = "sleep"
REGISTRY: dict[str, Any] = {
    SERVER_NAME: {"stdio": {"command": "python", "args": [str(Path(__file__).resolve())]}}
}

server = MCPServer(SERVER_NAME)


@server.tool()
async def sleep(seconds: float) -> str:
    """Wait ``seconds`` seconds, then say so."""
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"sleep: seconds must be a finite number >= 0, got {seconds!r}")
    await anyio.sleep(seconds)
    return f"slept {seconds:g} s"


if __name__ == "__main__":
    server.run()
