"""The swe domain: bugs planted in small Python projects, fixed through a shell MCP server."""
