"""MCP servers of the mcprl ``apps`` domain: ``mcprl_apps.shop`` and ``mcprl_apps.bank``.

Each is a small application (business rules in Python, state in one SQLite file) served over stdio
with the official ``mcp`` SDK: ``python -m mcprl_apps.shop --db shop.db``. A rule a call breaks
(out of stock, insufficient funds, unknown id, bad amount) is a tool error whose message says what
was wrong; it changes nothing.
"""
