"""An MCP server (stdio) whose tools misbehave on purpose, to test the gateway's failure handling.

Run: ``python tests/servers/edge_server.py [--fail-start]``. Tools:

- ``echo(text)``, ``pid()``, ``whereami()``, ``write_file(name, text)``: well-behaved probes;
- ``boom(message)``: raises ``ValueError(message)``;
- ``hang()``: blocks the server's event loop forever (ignores cancellation; only a kill ends it);
- ``crash()``: the process exits at once with status 3, mid-request;
- ``picture()``: returns an image and a text part; ``big(n)``: returns ``n`` characters.

``--fail-start`` prints a reason on stderr and exits 2 before speaking MCP (a server that never
comes up).
"""

from __future__ import annotations

import json
import os
import sys
import time

from mcp.server.mcpserver import Image, MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("edge")

# 1x1 transparent PNG
_PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@server.tool()
def pid() -> str:
    """The server's process id."""
    return str(os.getpid())


@server.tool()
def whereami() -> str:
    """The server's working directory, HOME and TMPDIR, as JSON."""
    return json.dumps(
        {"cwd": os.getcwd(), "home": os.environ.get("HOME"), "tmpdir": os.environ.get("TMPDIR")}
    )


@server.tool()
def write_file(name: str, text: str) -> str:
    """Write text to a file relative to the working directory."""
    with open(name, "w", encoding="utf-8") as f:
        f.write(text)
    return f"wrote {len(text)} characters to {name}"


@server.tool()
def boom(message: str) -> str:
    """Always raises ValueError(message)."""
    raise ValueError(message)


@server.tool()
async def hang() -> str:
    """Never returns: blocks the whole server, as a stuck native call would."""
    time.sleep(1e6)  # noqa: ASYNC251 -- blocking on purpose: the server cannot even read a cancel
    return "unreachable"


@server.tool()
def crash() -> str:
    """The process dies mid-request."""
    sys.stdout.flush()
    os._exit(3)


@server.tool()
def picture() -> list[Image | str]:
    """An image followed by a caption."""
    return [Image(data=_PNG, format="png"), "a transparent pixel"]


@server.tool()
def big(n: int) -> str:
    """A string of n characters."""
    return "x" * n


if __name__ == "__main__":
    if "--fail-start" in sys.argv[1:]:
        print("edge_server: refusing to start (--fail-start given)", file=sys.stderr)
        sys.exit(2)
    server.run()
