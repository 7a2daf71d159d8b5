"""The research domain's knowledge base: fictional entities, their facts, and their HTML pages.

``build_kb(rng)`` invents countries, cities, people, organisations and works (names built from
syllables, so no model has memorised them) with facts linking them: a person's birthplace and
mentor, the organisation they founded, an organisation's founder and headquarters, a city's
country and river, a country's capital, a work's creator and publisher. Distractors: some people
and organisations have a near-duplicate twin (one letter apart, different facts), and pages
mention other entities in passing (correspondents, notable people of a city, members).

Every fact is stated on its entity's page in one fixed sentence; ``PATTERNS`` holds the regular
expression per relation that reads it back from a page's text (links removed, whitespace folded),
anchored on the entity's name so that passing mentions never match. ``pages.render_pages`` gives
the pages by path (``wiki/<slug>.html``).
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field

ONSETS = (
    "b",
    "br",
    "d",
    "dr",
    "f",
    "g",
    "h",
    "k",
    "kh",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "t",
    "th",
    "v",
    "z",
    "y",
)
VOWELS = ("a", "e", "i", "o", "u", "ae", "ei", "ou", "y")
CODAS = ("", "", "n", "r", "l", "s", "th", "m", "sk", "v", "nd", "rr")
CITY_ENDS = ("mere", "ford", "holt", "wick", "gard", "moor", "stead", "haven", "dale", "port")
COUNTRY_ENDS = ("mark", "land", "ria", "stan", "vale", "orra")
FIELDS = (
    "cartographer",
    "chemist",
    "engineer",
    "astronomer",
    "composer",
    "botanist",
    "printer",
    "clockmaker",
)
ORG_KINDS = (
    ("Foundry", "foundry"),
    ("Institute", "research institute"),
    ("Works", "manufacturing company"),
    ("Guild", "craft guild"),
    ("Press", "publishing house"),
    ("Observatory", "observatory"),
    ("Society", "learned society"),
    ("Company", "trading company"),
)
WORK_KINDS = (
    "treatise",
    "atlas",
    "symphony",
    "engine design",
    "novel",
    "star catalogue",
    "herbal",
    "clock design",
)
ADJECTIVES = (
    "Glass",
    "Silent",
    "Amber",
    "Hollow",
    "Northern",
    "Copper",
    "Winding",
    "Pale",
    "Iron",
    "Seventh",
)
NOUNS = (
    "Meridian",
    "Lantern",
    "Orchard",
    "Compass",
    "Harbour",
    "Spiral",
    "Almanac",
    "Tide",
    "Loom",
    "Chorus",
)

SITE = "http://127.0.0.1:8765"
"""Where the pages are served inside an environment (the fetch server's sandbox, servers.json)."""
N_COUNTRIES, N_CITIES, N_PEOPLE, N_TWINS, N_ORGS, N_ORG_TWINS, N_WORKS = 8, 40, 96, 14, 64, 8, 56

# relation -> regex on the text of the page of entity {e} (re.escape'd name); group 1 is the value.
PATTERNS: dict[str, str] = {
    "birth_year": r"{e} was born in (\d{{4}}) in ",
    "birthplace": r"{e} was born in \d{{4}} in ([^.]+)\.",
    "mentor": r"{e} studied under ([^.]+)\.",
    "founded": r"{e} founded ([^.]+) in \d{{4}}\.",
    "founder": r"{e} is an? [a-z ]+ founded in \d{{4}} by ([^.]+)\.",
    "hq": r"The headquarters of {e} are in ([^.]+)\.",
    "country": r"{e} is a city in ([^.]+)\.",
    "river": r"The river ([^.]+) flows through {e}\.",
    "capital": r"{e} is a country whose capital is ([^.]+)\.",
    "creator": r"{e} is an? [a-z ]+ completed in \d{{4}} by ([^.]+)\.",
    "publisher": r"{e} was published by ([^.]+)\.",
}


def pattern(relation: str, entity: str) -> re.Pattern[str]:
    """The compiled reader of ``relation`` on ``entity``'s page; KeyError for an unknown relation."""
    return re.compile(PATTERNS[relation].format(e=re.escape(entity)))


@dataclass
class Entity:
    name: str
    kind: str  # country, city, person, organisation, work
    slug: str
    facts: dict[str, str] = field(default_factory=dict)
    numbers: dict[str, int] = field(default_factory=dict)
    mentions: list[str] = field(default_factory=list)
    twin: str | None = None


@dataclass
class KnowledgeBase:
    entities: dict[str, Entity] = field(default_factory=dict)

    def names_of(self, kind: str) -> list[str]:
        return [e.name for e in self.entities.values() if e.kind == kind]

    def fact(self, name: str, relation: str) -> str | None:
        e = self.entities[name]
        if relation == "birth_year":
            return str(e.numbers["born"]) if "born" in e.numbers else None
        return e.facts.get(relation)

    def url(self, name: str) -> str:
        return f"/wiki/{self.entities[name].slug}.html"


def _word(rng: random.Random, syllables: int) -> str:
    text = "".join(rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(CODAS) for _ in range(syllables))
    return text.capitalize()


def _twin_of(rng: random.Random, word: str) -> str:
    """``word`` with one vowel changed: a near-duplicate name."""
    spots = [i for i, c in enumerate(word) if c in "aeiou" and i > 0]
    i = rng.choice(spots) if spots else len(word) - 1
    return word[:i] + rng.choice([v for v in "aeiou" if v != word[i]]) + word[i + 1 :]


def _twin_name(rng: random.Random, base: str, word: int) -> str:
    """``base`` with its ``word``-th word (0 first, -1 last) made a near-duplicate."""
    words = base.split(" ")
    words[word] = _twin_of(rng, words[word])
    return " ".join(words)


class _Namer:
    def __init__(self, rng: random.Random) -> None:
        self.rng, self.taken = rng, set[str]()

    def fresh(self, make: Callable[[], str]) -> str:
        while True:
            name = make()
            if name not in self.taken and len(name) > 3:
                self.taken.add(name)
                return name


def _add(kb: KnowledgeBase, name: str, kind: str) -> Entity:
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    assert all(e.slug != slug for e in kb.entities.values()), slug
    entity = Entity(name=name, kind=kind, slug=slug)
    kb.entities[name] = entity
    return entity


def build_kb(rng: random.Random) -> KnowledgeBase:
    kb, namer = KnowledgeBase(), _Namer(rng)
    countries = [namer.fresh(lambda: _word(rng, 2) + rng.choice(COUNTRY_ENDS)) for _ in range(N_COUNTRIES)]
    cities = [namer.fresh(lambda: _word(rng, 1) + rng.choice(CITY_ENDS)) for _ in range(N_CITIES)]
    rivers = [namer.fresh(lambda: _word(rng, 2)) for _ in range(N_CITIES)]
    for name in countries:
        _add(kb, name, "country")
    for i, name in enumerate(cities):
        city = _add(kb, name, "city")
        city.facts.update(country=countries[i % N_COUNTRIES], river=rivers[i])
        city.numbers["chartered"] = rng.randint(900, 1500)
    for i, name in enumerate(countries):
        kb.entities[name].facts["capital"] = cities[i]  # city i is in country i (i < N_COUNTRIES)
    people = [namer.fresh(lambda: f"{_word(rng, 2)} {_word(rng, 2)}") for _ in range(N_PEOPLE)]
    for base in rng.sample(people, N_TWINS):
        people.append(namer.fresh(functools.partial(_twin_name, rng, base, -1)))
    for name in people:
        person = _add(kb, name, "person")
        person.numbers["born"] = rng.randint(1700, 1880)
        person.facts.update(birthplace=rng.choice(cities), field=rng.choice(FIELDS))
    by_age = sorted(people, key=lambda n: kb.entities[n].numbers["born"])
    for name in people:
        born = kb.entities[name].numbers["born"]
        elders = [m for m in by_age if born - 60 <= kb.entities[m].numbers["born"] <= born - 15]
        if elders:
            kb.entities[name].facts["mentor"] = rng.choice(elders)
    orgs = [namer.fresh(lambda: f"{_word(rng, 2)} {rng.choice(ORG_KINDS)[0]}") for _ in range(N_ORGS)]
    for base in rng.sample(orgs, N_ORG_TWINS):
        orgs.append(namer.fresh(functools.partial(_twin_name, rng, base, 0)))
    for name, founder in zip(orgs, rng.sample(people, len(orgs)), strict=True):
        org = _add(kb, name, "organisation")
        kind = dict(ORG_KINDS)[name.split(" ", 1)[1]]
        org.facts.update(founder=founder, hq=rng.choice(cities), kind=kind)
        org.numbers["year"] = kb.entities[founder].numbers["born"] + rng.randint(22, 55)
        kb.entities[founder].facts["founded"] = name
    works = [
        namer.fresh(lambda: f"The {rng.choice(ADJECTIVES)} {rng.choice(NOUNS)} of {_word(rng, 1)}")
        for _ in range(N_WORKS)
    ]
    for name in works:
        work = _add(kb, name, "work")
        creator = rng.choice(people)
        work.facts.update(creator=creator, publisher=rng.choice(orgs), kind=rng.choice(WORK_KINDS))
        work.numbers["year"] = kb.entities[creator].numbers["born"] + rng.randint(20, 60)
    _link_distractors(rng, kb, people, orgs)
    return kb


def _link_distractors(rng: random.Random, kb: KnowledgeBase, people: list[str], orgs: list[str]) -> None:
    for name in people + orgs:
        e = kb.entities[name]
        stem = name.rsplit(" ", 1)[0] if e.kind == "organisation" else name.split(" ", 1)[0]
        twins = [o for o in (people if e.kind == "person" else orgs) if o != name and o.startswith(stem)]
        twins = [
            o for o in twins if len(o) == len(name) and sum(a != b for a, b in zip(o, name, strict=True)) == 1
        ]
        e.twin = twins[0] if twins else None
    for name in people:
        kb.entities[name].mentions = rng.sample([p for p in people if p != name], 2)
    for name in orgs:
        kb.entities[name].mentions = rng.sample(people, 2)
