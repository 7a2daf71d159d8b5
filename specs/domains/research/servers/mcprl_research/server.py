"""An MCP search server: BM25 (``bm25s``) over the HTML pages under a directory.

    python -m mcprl_research.server --root site --base-url http://127.0.0.1:8765

One tool, ``search(query, k=5)``: the ``k`` best pages for the query, each as its title, its URL
(``<base-url>/<path under root>``, which the environment's fetch server can read) and a snippet of
its text. The pages are read on the first search (the environment's prepare writes them after the
server may have started) and read again when the set of files or their sizes change. Each page is
indexed as its title twice and its text; a page's title is its ``<title>``.
"""

from __future__ import annotations

import argparse
import html.parser
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import bm25s
import numpy as np
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

SNIPPET_CHARS = 200
MAX_K = 20


class _Text(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.title, self.parts, self._in_title = "", list[str](), False

    def handle_starttag(self, tag: str, attrs: object) -> None:
        self._in_title = self._in_title or tag == "title"

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        else:
            self.parts.append(data)


@dataclass(frozen=True)
class Page:
    title: str
    url: str
    text: str


def read_pages(root: Path, base_url: str) -> list[Page]:
    """Every ``*.html`` under ``root``, sorted by path."""
    pages = []
    for path in sorted(root.rglob("*.html")):
        parser = _Text()
        parser.feed(path.read_text(encoding="utf-8"))
        body = " ".join("".join(parser.parts).split())
        title = " ".join(parser.title.split())
        if body.startswith(title):
            body = body[len(title) :].lstrip()  # the <h1> repeats the title
        pages.append(Page(title, f"{base_url.rstrip('/')}/{path.relative_to(root).as_posix()}", body))
    return pages


class Index:
    """The BM25 index of the pages under ``root``, rebuilt when the files change."""

    def __init__(self, root: Path, base_url: str) -> None:
        self.root, self.base_url = root, base_url
        self._lock = threading.Lock()
        self._signature: tuple[tuple[str, int], ...] | None = None
        self._pages: list[Page] = []
        self._retriever: bm25s.BM25 | None = None

    def _current(self) -> tuple[tuple[str, int], ...]:
        if not self.root.is_dir():
            raise ToolError(f"no pages: {self.root} (cwd {os.getcwd()}) is not a directory")
        return tuple((str(p), p.stat().st_size) for p in sorted(self.root.rglob("*.html")))

    def _load(self) -> None:
        signature = self._current()
        if signature == self._signature:
            return
        pages = read_pages(self.root, self.base_url)
        if not pages:
            raise ToolError(f"no pages: no *.html under {self.root}")
        retriever = bm25s.BM25()
        docs = [f"{p.title} {p.title} {p.text}" for p in pages]
        retriever.index(bm25s.tokenize(docs, stopwords="en", show_progress=False), show_progress=False)
        self._pages, self._retriever, self._signature = pages, retriever, signature

    def search(self, query: str, k: int) -> list[Page]:
        with self._lock:
            self._load()
            assert self._retriever is not None
            (words,) = bm25s.tokenize([query], stopwords="en", return_ids=False, show_progress=False)
            ids = self._retriever.get_tokens_ids(words)
            if not ids:
                return []
            scores = self._retriever.get_scores_from_ids(ids)
            return [self._pages[i] for i in rank(scores)[:k] if scores[i] > 0]


def rank(scores: np.ndarray) -> list[int]:
    """Page indices by score, ties by page (path order). Not bm25s's own top-k: its argpartition
    and argsort order equal scores differently on different CPUs (numpy's SIMD sorts), so one query
    listed tied pages in another order on another machine. Scores are compared to 5 decimals, so
    sums added in another order still tie."""
    order = np.lexsort((np.arange(len(scores)), -np.round(scores.astype(np.float64), 5)))
    return [int(i) for i in order]


def format_results(query: str, pages: list[Page]) -> str:
    if not pages:
        return f"No results for {query!r}."
    lines = []
    for rank, page in enumerate(pages, 1):
        snippet = (
            page.text
            if len(page.text) <= SNIPPET_CHARS
            else page.text[:SNIPPET_CHARS].rsplit(" ", 1)[0] + " ..."
        )
        lines.append(f"[{rank}] {page.title}\nURL: {page.url}\n{snippet}")
    return "\n\n".join(lines)


def create_server(index: Index) -> MCPServer:
    server = MCPServer("research-search")

    @server.tool(
        annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True), structured_output=False
    )
    def search(
        query: Annotated[str, Field(description="Keywords to look for, e.g. a name")],
        k: Annotated[int, Field(description="How many results to return", ge=1, le=MAX_K)] = 5,
    ) -> str:
        """Search the encyclopedia: the best-matching pages, each with its title, URL and a snippet.
        Read a page in full by fetching its URL."""
        return format_results(query, index.search(query, k))

    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="BM25 search over HTML pages, over MCP (stdio)")
    parser.add_argument("--root", type=Path, default=Path("site"), help="directory of the pages")
    parser.add_argument("--base-url", default="http://127.0.0.1:8765", help="URL the root is served at")
    args = parser.parse_args(argv)
    create_server(Index(args.root, args.base_url)).run()


if __name__ == "__main__":
    main()
