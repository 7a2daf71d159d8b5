"""The mcprl ``gui`` domain's application: a small warehouse inventory reached two ways.

``python -m mcprl_gui.server --db inventory.db --ui-port 8000`` serves, from one process, the web
app (``web``: pages and forms for a browser, on the environment's loopback) and the MCP server
(stdio, official ``mcp`` SDK) with API tools for some of the same operations. Both go through one
``store.Store`` (rules, SQLite), so a change made one way is seen the other way.
"""
