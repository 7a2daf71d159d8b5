"""The ``apps`` domain: everyday tasks on a shop and a bank, each an MCP server over its own SQLite file."""
