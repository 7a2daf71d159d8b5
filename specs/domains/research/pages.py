"""The research domain's HTML pages: one per entity of the knowledge base (``kb.py``).

Each page states its entity's facts in the fixed sentences that ``kb.PATTERNS`` reads back, links
every entity it names to that entity's page (absolute URLs under ``kb.SITE``, where the environment
serves them), and adds the distractors: passing mentions and a "Not to be confused with" line
for a near-duplicate twin.
"""

from __future__ import annotations

import html

from specs.domains.research.kb import SITE, Entity, KnowledgeBase


def _article(noun: str) -> str:
    return "an" if noun[0] in "aeiou" else "a"


def _link(kb: KnowledgeBase, name: str) -> str:
    return f'<a href="{SITE}{kb.url(name)}">{html.escape(name)}</a>'


def _sentences(kb: KnowledgeBase, e: Entity) -> list[str]:
    f, n = e.facts, e.numbers

    def a(name: str) -> str:
        return _link(kb, name)

    name = html.escape(e.name)
    if e.kind == "country":
        cities = [c for c in kb.names_of("city") if kb.entities[c].facts["country"] == e.name]
        return [
            f"{name} is a country whose capital is {a(f['capital'])}.",
            "Its chartered cities include " + ", ".join(a(c) for c in cities) + ".",
        ]
    if e.kind == "city":
        natives = [p for p in kb.names_of("person") if kb.entities[p].facts["birthplace"] == e.name][:4]
        out = [
            f"{name} is a city in {a(f['country'])}.",
            f"The river {html.escape(f['river'])} flows through {name}.",
            f"{name} received its charter in the year {n['chartered']}.",
        ]
        if natives:
            out.append("Notable people from the city include " + ", ".join(a(p) for p in natives) + ".")
        return out
    if e.kind == "person":
        out = [
            f"{name} was {_article(f['field'])} {f['field']}.",
            f"{name} was born in {n['born']} in {a(f['birthplace'])}.",
        ]
        out.append(
            f"{name} studied under {a(f['mentor'])}." if "mentor" in f else f"{name} was largely self-taught."
        )
        if "founded" in f:
            out.append(f"{name} founded {a(f['founded'])} in {kb.entities[f['founded']].numbers['year']}.")
        students = [p for p in kb.names_of("person") if kb.entities[p].facts.get("mentor") == e.name][:3]
        if students:
            out.append("Among the students of " + name + " were " + ", ".join(a(s) for s in students) + ".")
        out.append(
            f"Letters show that {name} corresponded with " + " and ".join(a(m) for m in e.mentions) + "."
        )
        return out
    if e.kind == "organisation":
        return [
            f"{name} is {_article(f['kind'])} {f['kind']} founded in {n['year']} by {a(f['founder'])}.",
            f"The headquarters of {name} are in {a(f['hq'])}.",
            "Early members included " + " and ".join(a(m) for m in e.mentions) + ".",
        ]
    return [
        f"{name} is {_article(f['kind'])} {f['kind']} completed in {n['year']} by {a(f['creator'])}.",
        f"{name} was published by {a(f['publisher'])}.",
        f"Copies of {name} are rare today.",
    ]


def render_page(kb: KnowledgeBase, e: Entity) -> str:
    title = html.escape(e.name)
    body = "".join(f"<p>{s}</p>\n" for s in _sentences(kb, e))
    if e.twin is not None:
        body += f"<p>Not to be confused with {_link(kb, e.twin)}.</p>\n"
    return (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{title}</title></head>\n'
        f"<body><article>\n<h1>{title}</h1>\n{body}</article></body></html>\n"
    )


def render_pages(kb: KnowledgeBase) -> dict[str, str]:
    """Every page by its path under the site root (``wiki/<slug>.html``)."""
    return {kb.url(e.name).lstrip("/"): render_page(kb, e) for e in kb.entities.values()}
