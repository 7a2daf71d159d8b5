"""The research domain's scripted expert: search each hop's entity, fetch its page, read the next.

``respond(task, conversation)`` knows only where the chain starts and which relation each hop reads
(the private ``_hops``: the first entity and the relations; the later entities and the answer it
takes from the pages, never from ``_hops``). For hop ``i`` it calls ``research_search__search``
with the entity's name, picks the result whose title is exactly that name (near-duplicate
names rank beside it), calls ``fetch__fetch`` on its URL, and reads the relation's sentence on the
fetched text (``kb.PATTERNS``). After the last hop it answers ``Answer: <value>``. The whole state
is re-read from the conversation's ``<tool_response>`` blocks at every turn; a search result is read
only while it is the newest observation, so an observation rule that elides older costly ones
(``rollout.observation_rule``) leaves the expert everything it needs.
"""

from __future__ import annotations

import json
import re
from typing import Any

from specs.domains.research.kb import pattern

SEARCH, FETCH = "research_search__search", "fetch__fetch"
_RESPONSE = re.compile(r"<tool_response>\s*(.*?)\s*</tool_response>", re.DOTALL)
_RESULT = re.compile(r"^\[\d+\] (.+)\nURL: (\S+)", re.MULTILINE)
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")


class ExpertStuck(Exception):
    """A tool answer the expert cannot continue from (the page or the search result is missing)."""


def _call(name: str, arguments: dict[str, Any], say: str) -> str:
    return f"{say}\n<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def pick_url(results: str, title: str) -> str | None:
    """The URL of the search result titled exactly ``title``."""
    for found, url in _RESULT.findall(results.replace("\r\n", "\n")):
        if found.strip() == title:
            return str(url)
    return None


def read_relation(page: str, relation: str, entity: str) -> str | None:
    """The value of ``relation`` on ``entity``'s fetched page (links dropped, whitespace folded)."""
    text = " ".join(_LINK.sub(r"\1", page.replace("\\n", "\n")).split())
    match = pattern(relation, entity).search(text)
    return match.group(1).strip() if match else None


def respond(task: Any, conversation: str) -> str:
    """The next assistant message for ``task`` given the conversation rendered so far."""
    hops = task.private.get("_hops")
    if not hops:
        raise ValueError(f"task {task.instance_id}: the research expert needs a private '_hops' field")
    after_task = conversation[conversation.rfind(task.instruction) + len(task.instruction) :]
    responses = _RESPONSE.findall(after_task)
    think = "<think></think>" in conversation
    entity: str = hops[0]["entity"]
    for i, hop in enumerate(hops):
        relation = hop["relation"]
        if len(responses) <= 2 * i:
            plan = f"<think>I need the {relation} of {entity}. I will search for its page.</think>\n"
            return _call(SEARCH, {"query": entity, "k": 5}, f"{plan if think else ''}Searching for {entity}.")
        if len(responses) <= 2 * i + 1:  # the search result is the newest observation: never elided
            url = pick_url(responses[2 * i], entity)
            if url is None:
                raise ExpertStuck(
                    f"task {task.instance_id}: no search result titled {entity!r}: {responses[2 * i][:300]!r}"
                )
            plan = f"<think>The page of {entity} is {url}. I will read it.</think>\n"
            return _call(FETCH, {"url": url}, f"{plan if think else ''}Reading the page of {entity}.")
        value = read_relation(responses[2 * i + 1], relation, entity)
        if value is None:
            raise ExpertStuck(
                f"task {task.instance_id}: the page of {entity!r} states no {relation}: {responses[2 * i + 1][:300]!r}"
            )
        entity = value
    check = f"<think>Following the pages, the answer is {entity}.</think>\n"
    return f"{check if think else ''}Following the pages, the answer is {entity}.\nAnswer: {entity}"
