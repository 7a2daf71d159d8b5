"""The inventory's web app: plain HTML pages and forms over the same ``Store`` as the MCP tools.

    GET  /                    a search box and the categories; ?q=: the matching items
    GET  /item/<sku>          one item, with forms: adjust stock, move, set the price
    POST /item/<sku>/adjust   change, reason
    POST /item/<sku>/move     location
    POST /item/<sku>/price    price
    GET  /new, POST /new      add an item (only here: the MCP server has no tool for it)

A change that succeeds redirects to the item's page with a status line ("Saved: ..."); one that a
rule refuses shows the page again with an alert ("Error: ..."), changing nothing. Every form field
has a label and every action a button with a name, so an accessibility snapshot names them. Served
by ``serve`` from a thread of the MCP server's process (``server``), on the environment's loopback.
"""

from __future__ import annotations

import html
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from mcprl_gui.store import Refused, Store

STYLE = """body{font-family:sans-serif;margin:16px;color:#222}nav a{margin-right:12px}
table{border-collapse:collapse}td,th{border:1px solid #bbb;padding:3px 8px;text-align:left}
form{margin:6px 0 14px}label{margin-right:10px}dt{font-weight:bold;float:left;width:90px}
[role=status]{color:#176617}[role=alert]{color:#b00020;font-weight:bold}h2{font-size:1.1em}"""
ITEM_FIELDS = (("sku", "SKU"), ("category", "Category"), ("location", "Location"), ("quantity", "Quantity"))
NEW_FIELDS = (
    ("sku", "SKU"),
    ("name", "Name"),
    ("category", "Category"),
    ("location", "Location"),
    ("quantity", "Quantity"),
    ("price", "Price"),
)


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def page(title: str, body: str) -> str:
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(title)}</title>"
        f"<style>{STYLE}</style></head><body><nav><a href='/'>Search</a><a href='/new'>Add item</a>"
        f"</nav>{body}</body></html>"
    )


def notice(saved: str = "", error: str = "") -> str:
    if error:
        return f"<p role='alert'>Error: {esc(error)}</p>"
    return f"<p role='status'>Saved: {esc(saved)}</p>" if saved else ""


def field(name: str, label: str, value: str = "") -> str:
    return f"<label>{esc(label)} <input name='{name}' value='{esc(value)}'></label>"


def form(action: str, fields: str, button: str) -> str:
    return f"<form method='post' action='{esc(action)}'>{fields} <button>{esc(button)}</button></form>"


def list_page(store: Store, query: str) -> str:
    rows = query and "".join(
        f"<tr><td>{esc(i['sku'])}</td><td><a href='/item/{quote(i['sku'])}'>{esc(i['name'])}</a></td>"
        f"<td>{esc(i['category'])}</td><td>{esc(i['location'])}</td><td>{i['quantity']}</td>"
        f"<td>${i['price']:.2f}</td></tr>"
        for i in store.search(query)
    )
    search = f"<form method='get' action='/'>{field('q', 'Search', query)} <button>Search</button></form>"
    if not query:  # the start page: the search box and the categories, not every item
        links = "".join(f"<li><a href='/?q={quote(c)}'>{esc(c)}</a></li>" for c in store.categories())
        return page("Inventory", f"<h1>Inventory</h1>{search}<h2>Categories</h2><ul>{links}</ul>")
    head = "".join(f"<th>{h}</th>" for h in ("SKU", "Name", "Category", "Location", "Quantity", "Price"))
    table = f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
    return page("Inventory", f"<h1>Inventory</h1>{search}{table if rows else '<p>No items match.</p>'}")


def item_page(store: Store, sku: str, saved: str = "", error: str = "") -> str:
    item = store.item(sku)
    base = f"/item/{quote(item['sku'])}"
    facts = "".join(f"<dt>{label}</dt><dd>{esc(item[key])}</dd>" for key, label in ITEM_FIELDS)
    body = (
        f"<h1>{esc(item['name'])}</h1>{notice(saved, error)}<dl>{facts}"
        f"<dt>Price</dt><dd>${item['price']:.2f}</dd></dl>"
        f"<h2>Adjust stock</h2>"
        + form(f"{base}/adjust", field("change", "Change") + field("reason", "Reason"), "Apply change")
        + "<h2>Move</h2>"
        + form(f"{base}/move", field("location", "New location"), "Move item")
        + "<h2>Price</h2>"
        + form(f"{base}/price", field("price", "New price"), "Save price")
    )
    return page(f"{item['name']} - Inventory", body)


def new_page(values: dict[str, str], error: str = "") -> str:
    fields = "".join(field(name, label, values.get(name, "")) for name, label in NEW_FIELDS)
    return page(
        "Add item - Inventory", f"<h1>Add item</h1>{notice(error=error)}" + form("/new", fields, "Add item")
    )


class Handler(BaseHTTPRequestHandler):
    store: Store  # set on the subclass ``serve`` makes

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        """Quiet: the server's stderr is the MCP server's log."""

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        url = urlsplit(self.path)
        params = {k: v[0] for k, v in parse_qs(url.query).items()}
        try:
            if url.path == "/":
                self.send(HTTPStatus.OK, list_page(self.store, params.get("q", "")))
            elif url.path == "/favicon.ico":
                self.send_response(HTTPStatus.NO_CONTENT)
                self.end_headers()
            elif url.path == "/new":
                self.send(HTTPStatus.OK, new_page({}))
            elif url.path.startswith("/item/") and url.path.count("/") == 2:
                sku = unquote(url.path.removeprefix("/item/"))
                self.send(HTTPStatus.OK, item_page(self.store, sku, saved=params.get("saved", "")))
            else:
                self.send(HTTPStatus.NOT_FOUND, page("Not found", f"<h1>No page {esc(url.path)}</h1>"))
        except Refused as e:
            self.send(HTTPStatus.NOT_FOUND, page("Not found", notice(error=str(e))))

    def do_POST(self) -> None:  # noqa: N802 - the base class's name
        length = int(self.headers.get("Content-Length") or 0)
        values = {
            k: v[0] for k, v in parse_qs(self.rfile.read(length).decode(), keep_blank_values=True).items()
        }
        path = urlsplit(self.path).path
        if path == "/new":
            try:
                item = self.store.add(values, "web")
            except Refused as e:
                self.send(HTTPStatus.BAD_REQUEST, new_page(values, str(e)))
                return
            self.redirect(item["sku"], f"added {item['name']}")
            return
        parts = path.split("/")  # "", "item", sku, action
        if len(parts) != 4 or parts[1] != "item":
            self.send(HTTPStatus.NOT_FOUND, page("Not found", f"<h1>No form at {esc(path)}</h1>"))
            return
        sku, action = unquote(parts[2]), parts[3]
        try:
            if action == "adjust":
                item = self.store.adjust(sku, values.get("change", ""), values.get("reason", ""), "web")
                done = f"quantity is now {item['quantity']}"
            elif action == "move":
                item = self.store.move(sku, values.get("location", ""), "web")
                done = f"location is now {item['location']}"
            elif action == "price":
                item = self.store.set_price(sku, values.get("price", ""), "web")
                done = f"price is now ${item['price']:.2f}"
            else:
                raise Refused(f"no action {action!r}")
        except Refused as e:
            try:
                self.send(HTTPStatus.BAD_REQUEST, item_page(self.store, sku, error=str(e)))
            except Refused:
                self.send(HTTPStatus.NOT_FOUND, page("Not found", notice(error=str(e))))
            return
        self.redirect(item["sku"], done)

    def redirect(self, sku: str, saved: str) -> None:
        self.send_response(HTTPStatus.SEE_OTHER)
        self.send_header("Location", f"/item/{quote(sku)}?saved={quote(saved)}")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def send(self, status: HTTPStatus, body: str) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def serve(store: Store, host: str, port: int) -> ThreadingHTTPServer:
    """Start the web app on ``host:port`` in a daemon thread; raises ``OSError`` if the port is taken."""
    handler = type("InventoryHandler", (Handler,), {"store": store})
    httpd = ThreadingHTTPServer((host, port), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, name="inventory-web", daemon=True).start()
    return httpd
