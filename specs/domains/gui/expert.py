"""The gui domain's scripted experts: one that prefers the inventory's tools, one that uses only the GUI.

``respond`` (tool-preferring) does each step through an MCP tool where one exists and through the
browser where none does (setting a price, adding an item); ``respond_gui`` does every step through
the browser, as paper 002's GUI-only agent. Both replay a per-family script (a generator of tool
calls) against the tool results seen so far in the conversation, like the apps expert: SKUs and
quantities come from the inventory's answers, element refs from the browser's accessibility
snapshots (``browser_snapshot``), so nothing of the state is known offline. A GUI step looks at the
page (``browser_take_screenshot``: the image observation), reads the snapshot for the refs, fills
the form (``browser_fill_form``), presses its button, reads the page again for the app's "Saved:"
line and looks at it once more; an "Error:" alert or a tool error ends the episode with a reply that
says so. The scripts never read a screenshot's observation, so a rule that drops old screenshots
(window-k on images) leaves them working.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Generator
from typing import Any

from specs.domains.gui.families import URL
from specs.domains.scripts import Call, Script, respond_with

Step = Generator[Call, str, Any]
NEW_ITEM_FIELDS = ("SKU", "Name", "Category", "Location", "Quantity", "Price")


class ToolFailed(Exception):
    """A tool answered with an error, or the page showed one."""


def ref(snapshot: str, role: str, name: str) -> str:
    """The element ref of ``role "name"`` in an accessibility snapshot."""
    found = re.search(rf'{role} "{re.escape(name)}"[^\n]*\[ref=(\w+)\]', snapshot)
    if found is None:
        raise ToolFailed(f'the page has no {role} "{name}"')
    return found.group(1)


def _checked(text: str) -> str:
    if text.startswith("error ("):
        raise ToolFailed(text[:300])
    return text


def _json(text: str) -> Any:
    try:
        return json.loads(_checked(text))
    except json.JSONDecodeError:
        raise ToolFailed(text.strip()[:300]) from None


def browse(tool: str, why: str, **arguments: Any) -> Step:
    """One browser call; its result's text."""
    return _checked((yield f"browser__{tool}", arguments, why))


def open_item(name: str) -> Step:
    """Open the app, look at it, search for ``name`` and open its page; the page's snapshot."""
    yield from browse("browser_navigate", "Open the inventory web app.", url=URL)
    yield from browse("browser_take_screenshot", "Look at the page.", type="png", scale="css")
    page = yield from browse("browser_snapshot", "Read the page to find the search box.")
    search = ref(page, "textbox", "Search")
    yield from browse(
        "browser_type", f"Search for {name}.", element="Search", target=search, text=name, submit=True
    )
    page = yield from browse("browser_snapshot", "Find the item in the results.")
    yield from browse("browser_click", f"Open {name}.", element=name, target=ref(page, "link", name))
    return (yield from browse("browser_snapshot", "Read the item's page and its forms."))


def submit(page: str, values: dict[str, str], button: str) -> Step:
    """Fill the labelled fields of ``page``, press ``button``; the page after (its "Saved:" line)."""
    fields = [
        {"name": label, "type": "textbox", "target": ref(page, "textbox", label), "value": value}
        for label, value in values.items()
    ]
    yield from browse("browser_fill_form", "Fill in the form.", fields=fields)
    yield from browse("browser_click", f"Press {button}.", element=button, target=ref(page, "button", button))
    after = yield from browse("browser_snapshot", "Check that the app saved it.")
    alert = re.search(r"alert[^\n]*: (Error: [^\n]*)", after)
    if alert or "Saved:" not in after:
        raise ToolFailed(alert.group(1) if alert else "the app did not say it saved the change")
    yield from browse("browser_take_screenshot", "Look at the saved page.", type="png", scale="css")
    return after


def gui_adjust(p: dict[str, Any]) -> Step:
    page = yield from open_item(p["name"])
    return (yield from submit(page, {"Change": str(p["change"]), "Reason": p["reason"]}, "Apply change"))


def gui_move(p: dict[str, Any], page: str | None = None) -> Step:
    page = page or (yield from open_item(p["name"]))
    yield from submit(page, {"New location": p["location"]}, "Move item")


def gui_price(p: dict[str, Any]) -> Step:
    page = yield from open_item(p["name"])
    yield from submit(page, {"New price": p["price"]}, "Save price")


def find(name: str) -> Step:
    """The item named ``name``, through the inventory's search tool."""
    found = _json((yield "inventory__search_items", {"query": name}, f"Find {name}'s SKU."))
    items = [i for i in found["items"] if i["name"] == name]
    if len(items) != 1:
        raise ToolFailed(f"search_items found {len(items)} items named {name!r}")
    return items[0]


def tool_adjust(p: dict[str, Any]) -> Step:
    item = yield from find(p["name"])
    args = {"sku": item["sku"], "change": p["change"], "reason": p["reason"]}
    return _json((yield "inventory__adjust_stock", args, "Record the stock change."))


def tool_move(p: dict[str, Any]) -> Step:
    item = yield from find(p["name"])
    args = {"sku": item["sku"], "location": p["location"]}
    return _json((yield "inventory__move_item", args, "Move the item."))


def adjusted(p: dict[str, Any]) -> str:
    return f"{p['name']}: stock changed by {p['change']} ({p['reason']})."


# -- scripts by family: (tool-preferring, GUI-only) ------------------------------------------------


def restock(p: dict[str, Any], gui: bool) -> Script:
    yield from (gui_adjust(p) if gui else tool_adjust(p))
    return f"I recorded it. {adjusted(p)}"


def relocate(p: dict[str, Any], gui: bool) -> Script:
    yield from (gui_move(p) if gui else tool_move(p))
    return f"I moved {p['name']} to {p['location']}."


def stock_question(p: dict[str, Any], gui: bool) -> Script:
    if gui:
        page = yield from open_item(p["name"])
        found = re.search(r"definition[^\n]*: \"?(\d+)\"?\n", page.split(": Quantity\n", 1)[-1])
        if found is None:
            raise ToolFailed("the item's page shows no quantity")
        quantity = int(found.group(1))
    else:
        quantity = (yield from find(p["name"]))["quantity"]
    return f"{p['name']} has {quantity} units in stock. The answer is {quantity}."


def set_price(p: dict[str, Any], gui: bool) -> Script:
    yield from gui_price(p)  # no tool sets a price
    return f"The price of {p['name']} is now ${p['price']}."


def add_item(p: dict[str, Any], gui: bool) -> Script:
    fields = p["fields"]
    yield from browse("browser_navigate", "Open the app's form for a new item.", url=f"{URL}new")
    yield from browse("browser_take_screenshot", "Look at the page.", type="png", scale="css")
    page = yield from browse("browser_snapshot", "Read the form.")
    yield from submit(page, {label: fields[label.lower()] for label in NEW_ITEM_FIELDS}, "Add item")
    return f"I added {fields['name']} ({fields['sku']}) to the inventory."


def price_and_restock(p: dict[str, Any], gui: bool) -> Script:
    if gui:
        page = yield from gui_adjust(p)
        yield from submit(page, {"New price": p["price"]}, "Save price")
    else:
        yield from tool_adjust(p)
        yield from gui_price(p)
    return f"{adjusted(p)} The price is now ${p['price']}."


def restock_and_move(p: dict[str, Any], gui: bool) -> Script:
    if gui:
        page = yield from gui_adjust(p)
        yield from gui_move(p, page)
    else:
        yield from tool_adjust(p)
        yield from tool_move(p)
    return f"{adjusted(p)} It is now at {p['location']}."


SCRIPTS: dict[str, Callable[[dict[str, Any], bool], Script]] = {
    "restock": restock,
    "write_off": restock,
    "relocate": relocate,
    "stock_question": stock_question,
    "set_price": set_price,
    "add_item": add_item,
    "price_and_restock": price_and_restock,
    "restock_and_move": restock_and_move,
}


def _respond(task: Any, conversation: str, gui: bool) -> str:
    plan = task.private.get("_plan")
    if not isinstance(plan, dict) or plan.get("family") not in SCRIPTS:
        raise ValueError(
            f"task {task.instance_id}: the gui expert needs a private '_plan' with a known family"
        )
    return respond_with(SCRIPTS[plan["family"]](plan, gui), task, conversation, str, ToolFailed)


def respond(task: Any, conversation: str) -> str:
    """The tool-preferring expert's next message: MCP tools where they can, the GUI where not."""
    return _respond(task, conversation, gui=False)


def respond_gui(task: Any, conversation: str) -> str:
    """The GUI-only expert's next message: every step through the browser."""
    return _respond(task, conversation, gui=True)
