"""BM25 search over a directory of HTML pages, served over MCP (``python -m mcprl_research.server``)."""
