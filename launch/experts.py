"""The scripted expert of a run: each domain's ``domain.expert``, picked per task.

A run over one domain uses its expert as it is; a run that mixes domains (``mix``) answers each task
with the expert of the domain the task came from. Resolved in the driver, before anything starts,
so a bad import string is refused naming the config field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from policies.scripted import Respond
from specs.config import RunConfig
from specs.errors import SpecError
from specs.registry import resolve_import
from specs.task import TaskSpec


def run_expert(cfg: RunConfig, *splits: Mapping[str, Sequence[TaskSpec]]) -> Respond:
    """The expert for the tasks of ``splits`` (``specs.check.load_split`` results, by domain)."""
    experts: dict[str, Respond] = {}
    for i, domain in enumerate(cfg.domains):
        where = f"mix[{i}].expert" if cfg.mix else "domain.expert"
        if not domain.expert:
            raise SpecError("run config", where, f"domain {domain.name!r} has no scripted expert")
        experts[domain.name] = resolve_import(domain.expert, where)
    if len(experts) == 1:
        return next(iter(experts.values()))
    owner = {t.instance_id: name for split in splits for name, tasks in split.items() for t in tasks}

    def respond(task: Any, conversation: str) -> str:
        return experts[owner[task.instance_id]](task, conversation)

    return respond
