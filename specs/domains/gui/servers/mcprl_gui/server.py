"""The inventory's MCP server; its process also serves the web app (``web``) from a thread.

    python -m mcprl_gui.server --db inventory.db [--ui-host 127.0.0.1] [--ui-port 8000]

Tools: ``search_items``, ``get_item``, ``list_locations`` (read-only), ``adjust_stock``,
``move_item``. Setting a price and adding an item are the web app's alone: a task that needs them
is solvable only through the GUI. The web app listens on the environment's own loopback (each
bwrap or docker environment has one), started before the MCP session, so it is up once the
gateway has listed the tools. A port already taken ends the process with a message that says so.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

from mcprl_gui.store import Refused, Store
from mcprl_gui.web import serve

READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITE = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)
T = TypeVar("T")


def checked(run: Callable[[], T]) -> T:
    """``run()``, with a refused rule as the tool's error."""
    try:
        return run()
    except Refused as e:
        raise ToolError(str(e)) from None


def build(store: Store) -> MCPServer:
    """The inventory server over ``store``."""
    app = MCPServer("inventory", instructions="A warehouse inventory. Prices are in dollars.")

    @app.tool(annotations=READ)
    def search_items(query: str = "") -> dict[str, Any]:
        """Items whose SKU, name, category or location contains ``query`` (all items when empty)."""
        return {"items": checked(lambda: store.search(query))}

    @app.tool(annotations=READ)
    def get_item(sku: str) -> dict[str, Any]:
        """One item by SKU: name, category, location, quantity in stock, price."""
        return checked(lambda: store.item(sku))

    @app.tool(annotations=READ)
    def list_locations() -> dict[str, Any]:
        """The storage locations items can be moved to."""
        return {"locations": checked(store.locations)}

    @app.tool(annotations=WRITE)
    def adjust_stock(sku: str, change: int, reason: str) -> dict[str, Any]:
        """Add ``change`` units to an item's stock (negative to take units out), with a reason."""
        return checked(lambda: store.adjust(sku, change, reason, "api"))

    @app.tool(annotations=WRITE)
    def move_item(sku: str, location: str) -> dict[str, Any]:
        """Move an item to another storage location (a code from ``list_locations``)."""
        return checked(lambda: store.move(sku, location, "api"))

    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="mcprl_gui.server")
    parser.add_argument("--db", required=True, type=Path, help="the inventory's SQLite file")
    parser.add_argument("--ui-host", default="127.0.0.1", help="where the web app listens")
    parser.add_argument("--ui-port", type=int, default=8000)
    args = parser.parse_args(argv)
    store = Store(args.db)
    try:
        serve(store, args.ui_host, args.ui_port)
    except OSError as e:
        sys.exit(
            f"mcprl_gui.server: the web app cannot listen on {args.ui_host}:{args.ui_port} ({e}); "
            "each environment needs a network of its own (bwrap, docker), or another --ui-port"
        )
    build(store).run("stdio")


if __name__ == "__main__":
    main()
