"""Writing task files: what every domain's seeded generator shares.

A generator builds its tasks as plain dicts; ``write_task_files`` refuses any task the loader would
refuse (``specs.task.parse_tasks``), then writes each file with ``render``: indented JSON, keys in
insertion order, UTF-8, one trailing newline, so a fresh generation is byte for byte the shipped
file (each domain's tests check that).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from specs.task import parse_tasks

World = TypeVar("World")
Draft = dict[str, Any]
MAX_TRIES = 500


def draw_round_robin(
    rng: random.Random,
    world: World,
    families: Mapping[str, Callable[[random.Random, World], Draft | None]],
    n: int,
    prefix: str,
    seen: set[str],
    task: Callable[[str, str, Draft], dict[str, Any]],
    start: int = 0,
) -> list[dict[str, Any]]:
    """``n`` tasks ``<prefix>-0000``... from ``families`` taken in turn (balanced), each a new
    instruction (``seen`` grows); a family's ``None`` (a draw the world does not fit) draws again.
    ``task(instance_id, family, draft)`` makes the task dict. ``start``: go on from an earlier draw
    of ``start`` tasks with the same prefix (its numbering and its turn among the families)."""
    names = list(families)
    tasks: list[dict[str, Any]] = []
    while len(tasks) < n:
        k = start + len(tasks)
        family = names[k % len(names)]
        for _ in range(MAX_TRIES):
            d = families[family](rng, world)
            if d is not None and d["instruction"] not in seen:
                break
        else:
            raise RuntimeError(f"family {family!r}: no new task in {MAX_TRIES} draws")
        seen.add(d["instruction"])
        tasks.append(task(f"{prefix}-{k:04d}", family, d))
    return tasks


def train_and_eval(
    rng: random.Random,
    world: World,
    train_families: Mapping[str, Callable[[random.Random, World], Draft | None]],
    heldout_families: Mapping[str, Callable[[random.Random, World], Draft | None]],
    n_train: int,
    n_eval: int,
    prefix: str,
    task: Callable[[str, str, Draft], dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(train, eval)``: ``<prefix>-train-*`` from the train families, then eval as half new draws of
    them (``<prefix>-eval-seen-*``) and half held-out families (``<prefix>-eval-heldout-*``), no
    instruction twice (``draw_round_robin``)."""
    seen: set[str] = set()
    train = draw_round_robin(rng, world, train_families, n_train, f"{prefix}-train", seen, task)
    seen_half = draw_round_robin(rng, world, train_families, n_eval // 2, f"{prefix}-eval-seen", seen, task)
    heldout = draw_round_robin(
        rng, world, heldout_families, n_eval - n_eval // 2, f"{prefix}-eval-heldout", seen, task
    )
    return train, seen_half + heldout


def render(tasks: Sequence[Any]) -> str:
    """The text of a task file (or any generated JSON list) as the generators write it."""
    return json.dumps(list(tasks), indent=2, ensure_ascii=False) + "\n"


def write_task_files(
    directory: Path, files: Mapping[str, Sequence[dict[str, Any]]], variables: Mapping[str, str] | None = None
) -> None:
    """Check, then write ``directory/<name>`` for each ``name -> tasks``; ``variables`` fill the
    tasks' ``{{VAR}}`` templates for the check only (the files keep the templates)."""
    for name, tasks in files.items():
        parse_tasks(list(tasks), str(directory / name), variables)  # SpecError before anything is written
    directory.mkdir(parents=True, exist_ok=True)
    for name, tasks in files.items():
        (directory / name).write_text(render(tasks), encoding="utf-8")
