"""Generate the research domain: a fictional encyclopedia and multi-hop questions over it.

Deterministic for a seed: ``python -m specs.domains.research.generate`` rewrites ``corpus.json``
(the pages), ``tasks/train.json``, ``tasks/eval.json`` and ``tasks/eval_judged.json`` byte for byte;
a test checks the shipped files equal a fresh generation.

The knowledge base (``kb.py``) holds invented countries, cities, people,
organisations and works, with distractors: near-duplicate names, people mentioned in passing on
other pages. Each entity is one HTML page under ``wiki/`` whose facts are stated in fixed sentence
templates (``pages.py``, read back by ``kb.PATTERNS``) and linked to the entities they name.

A question follows a chain of relations from a start entity (``X -> mentor -> birthplace``): each
relation is read on one page, so the hop count (the ``category``, ``research/<n>hop``) is the number
of pages the answer needs. Eval holds half seen templates (new start entities) and half held-out
templates that never appear in training, alternating (so its first tasks hold both). Private fields: ``_hops`` (the chain: each page's entity,
the relation read there and its value), ``_answer`` and ``_template``. ``eval_judged.json`` holds the
eval questions scored by the ``deepresearch.llm_as_judge`` op instead (an OpenAI-compatible endpoint
named by ``{{JUDGE_BASE_URL}}`` / ``{{JUDGE_MODEL}}``).
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

from specs.domains.research.kb import KnowledgeBase, build_kb
from specs.domains.research.pages import render_pages
from specs.task import parse_tasks

DOMAIN = Path(__file__).resolve().parent
OUTPUT_FORMAT = "End your reply with one final line of the form: Answer: <answer>"
PREPARE = [{"prepare_func": "research.corpus", "prepare_args": {}}]
JUDGE_VARS = {"JUDGE_BASE_URL": "http://127.0.0.1:1/v1", "JUDGE_MODEL": "judge"}
"""Stand-ins for checking ``eval_judged.json`` at generation: the run config or environment gives the real ones."""
SERVERS = [{"name": "research_search"}, {"name": "fetch"}]

# template -> (start kind, relations, phrasings); {x} is the start entity's name.
Template = tuple[str, tuple[str, ...], tuple[str, ...]]
TRAIN_TEMPLATES: dict[str, Template] = {
    "mentor_birthplace": (
        "person",
        ("mentor", "birthplace"),
        (
            "In which city was the mentor of {x} born?",
            "{x} studied under someone. Where was that teacher born?",
        ),
    ),
    "founded_hq": (
        "person",
        ("founded", "hq"),
        (
            "In which city is the headquarters of the organisation founded by {x}?",
            "{x} founded an organisation. In which city does it have its headquarters?",
        ),
    ),
    "creator_birth_year": (
        "work",
        ("creator", "birth_year"),
        ("In which year was the creator of {x} born?", "What is the birth year of the person who made {x}?"),
    ),
    "mentor_founded_hq": (
        "person",
        ("mentor", "founded", "hq"),
        (
            "In which city is the headquarters of the organisation founded by the mentor of {x}?",
            "The teacher of {x} founded an organisation. Where are its headquarters?",
        ),
    ),
    "publisher_founder_birthplace": (
        "work",
        ("publisher", "founder", "birthplace"),
        (
            "In which city was the founder of the organisation that published {x} born?",
            "{x} was published by an organisation. Where was its founder born?",
        ),
    ),
    "creator_mentor_birthplace_country": (
        "work",
        ("creator", "mentor", "birthplace", "country"),
        (
            "In which country was the mentor of the creator of {x} born?",
            "The person who made {x} studied under a teacher. In which country was that teacher born?",
        ),
    ),
}
HELDOUT_TEMPLATES: dict[str, Template] = {
    "founder_mentor": (
        "organisation",
        ("founder", "mentor"),
        ("Who was the mentor of the founder of {x}?",),
    ),
    "birthplace_country_capital": (
        "person",
        ("birthplace", "country", "capital"),
        ("What is the capital of the country in which {x} was born?",),
    ),
    "mentor_founded_hq_river": (
        "person",
        ("mentor", "founded", "hq", "river"),
        (
            "Which river flows through the city where the organisation founded by the mentor of {x} has its headquarters?",
        ),
    ),
}


def _chain(kb: KnowledgeBase, start: str, relations: tuple[str, ...]) -> list[dict[str, str]] | None:
    """The hops from ``start`` along ``relations``, or ``None`` where one is missing."""
    hops: list[dict[str, str]] = []
    entity = start
    for relation in relations:
        value = kb.fact(entity, relation)
        if value is None:
            return None
        hops.append({"entity": entity, "relation": relation, "value": value})
        entity = value
    return hops


def _task(
    instance_id: str, family: str, text: str, hops: list[dict[str, str]], judged: bool
) -> dict[str, Any]:
    answer = hops[-1]["value"]
    if judged:
        evaluator: dict[str, Any] = {
            "func": "raw",
            "op": "deepresearch.llm_as_judge",
            "op_args": {
                "correct_answer": answer,
                "base_url": "{{JUDGE_BASE_URL}}",
                "model": "{{JUDGE_MODEL}}",
                "api_key_env": "JUDGE_API_KEY",
            },
            "desc": "An LLM judge finds the reply's final answer equivalent to the reference.",
        }
    else:
        evaluator = {
            "func": "raw",
            "op": "research.exact_match",
            "value": answer,
            "desc": "The reply's 'Answer:' line equals the answer after normalisation.",
        }
    return {
        "instance_id": instance_id,
        "category": f"research/{len(hops)}hop",
        "instruction": text,
        "output_format": OUTPUT_FORMAT,
        "use_specified_server": True,
        "mcp_servers": SERVERS,
        "prepares": PREPARE,
        "evaluators": [evaluator],
        "_hops": hops,
        "_answer": answer,
        "_template": family,
    }


def _draw(
    rng: random.Random,
    kb: KnowledgeBase,
    templates: dict[str, Template],
    n: int,
    prefix: str,
    used: set[tuple[str, str]],
) -> list[tuple[str, str, str, list[dict[str, str]]]]:
    """``n`` (id, family, text, hops), round robin over the templates, no (family, start) twice."""
    names = list(templates)
    out: list[tuple[str, str, str, list[dict[str, str]]]] = []
    while len(out) < n:
        family = names[len(out) % len(names)]
        kind, relations, phrasings = templates[family]
        start = rng.choice(kb.names_of(kind))
        hops = _chain(kb, start, relations)
        if hops is None or (family, start) in used:
            continue
        used.add((family, start))
        text = rng.choice(phrasings).format(x=start)
        out.append((f"{prefix}-{len(out):04d}", family, text, hops))
    return out


def generate(
    seed: int = 0, n_train: int = 120, n_eval: int = 36
) -> tuple[dict[str, str], list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(pages by path, train, eval, eval_judged): eval half seen templates, half held-out."""
    rng = random.Random(seed)
    kb = build_kb(rng)
    used: set[tuple[str, str]] = set()
    train = _draw(rng, kb, TRAIN_TEMPLATES, n_train, "research-train", used)
    seen = _draw(rng, kb, TRAIN_TEMPLATES, n_eval // 2, "research-eval-seen", used)
    heldout = _draw(rng, kb, HELDOUT_TEMPLATES, n_eval - n_eval // 2, "research-eval-heldout", used)
    evals = (
        [t for pair in zip(seen, heldout, strict=False) for t in pair]
        + seen[len(heldout) :]
        + heldout[len(seen) :]
    )
    return (
        render_pages(kb),
        [_task(*t, judged=False) for t in train],
        [_task(*t, judged=False) for t in evals],
        [_task(i.replace("research-eval", "research-judged"), f, x, h, judged=True) for i, f, x, h in evals],
    )


def render(data: Any) -> str:
    return json.dumps(data, indent=1, ensure_ascii=False, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=DOMAIN)
    args = parser.parse_args(argv)
    pages, train, evals, judged = generate(args.seed)
    (args.out / "tasks").mkdir(parents=True, exist_ok=True)
    for name, tasks in (("train.json", train), ("eval.json", evals), ("eval_judged.json", judged)):
        # refuse to write a task the loader would refuse (the judge's endpoint is filled at load)
        parse_tasks(tasks, str(args.out / "tasks" / name), JUDGE_VARS)
        (args.out / "tasks" / name).write_text(render(tasks), encoding="utf-8")
    (args.out / "corpus.json").write_text(render(pages), encoding="utf-8")
    print(f"wrote {len(pages)} pages, {len(train)} train, {len(evals)} eval and {len(judged)} judged tasks")


if __name__ == "__main__":
    main()
