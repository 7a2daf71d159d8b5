"""Hooks of the research domain: the corpus prepare and the exact-match evaluator.

``research.corpus`` writes the encyclopedia's pages (``corpus.json``, made by ``generate.py``) into
the environment's ``site/`` directory with one ``tar -x`` (the archive on its stdin), where the
search server (``mcprl_research``) indexes them and the HTTP server beside the fetch server serves
them (``servers.json``). ``research.exact_match`` compares the reply's last ``Answer:`` line with
the reference after SQuAD-style normalisation (lowercase; punctuation, articles and extra
whitespace removed); ``value`` is the answer or a list of accepted answers.
"""

from __future__ import annotations

import functools
import io
import json
import re
import string
import tarfile
import time
from pathlib import Path
from typing import Any

from rewards.ops import EvalOutcome
from specs.env import EnvHandle
from specs.errors import EvaluatorError
from specs.registry import evaluator, prepare
from specs.task import TaskSpec
from specs.trajectory import Trajectory

CORPUS = Path(__file__).resolve().parent / "corpus.json"
SITE_DIR = "site"
_ANSWER = re.compile(r"^\W*(?:final\s+)?answer\W*?:[\s*]*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


@functools.cache
def corpus_archive(corpus: Path = CORPUS) -> bytes:
    """The pages of ``corpus`` as an uncompressed tar under ``site/`` (built once per process)."""
    pages: dict[str, str] = json.loads(corpus.read_text(encoding="utf-8"))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for path, text in sorted(pages.items()):
            data = text.encode("utf-8")
            info = tarfile.TarInfo(f"{SITE_DIR}/{path}")
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@prepare("research.corpus")
async def write_corpus(env: EnvHandle, task: TaskSpec) -> None:
    """Unpack the pages into ``site/`` of the environment (one exec)."""
    started = time.monotonic()
    result = await env.run(["tar", "-x", "-f", "-"], stdin=corpus_archive(), timeout_s=30.0)
    if result.returncode != 0:
        raise OSError(
            f"research.corpus in env {env.info.env_id} for task {task.instance_id}: tar -x failed "
            f"(exit {result.returncode}) after {time.monotonic() - started:.2f}s: {result.stderr.strip()}"
        )


def normalize(text: str) -> str:
    """SQuAD normalisation: lowercase, no punctuation, no articles, single spaces."""
    text = "".join(c for c in text.lower() if c not in string.punctuation)
    return " ".join(_ARTICLES.sub(" ", text).split())


def final_answer(reply: str) -> str | None:
    """What follows the last ``Answer:`` (or ``Final answer:``) line of the reply, else ``None``."""
    found = _ANSWER.findall(reply)
    return found[-1] if found else None


@evaluator("research.exact_match")
async def exact_match(
    env: EnvHandle, task: TaskSpec, trajectory: Trajectory, value: Any = None, **op_args: Any
) -> EvalOutcome:
    """The reply's ``Answer:`` equals ``value`` (or one of a list) after ``normalize``."""
    if op_args:
        raise EvaluatorError(f"research.exact_match takes no op_args, got {sorted(op_args)}")
    accepted = value if isinstance(value, list) else [value]
    if not accepted or not all(isinstance(a, str) and normalize(a) for a in accepted):
        raise EvaluatorError(
            f"research.exact_match: value must be a non-empty answer or list of them, got {value!r}"
        )
    answer = final_answer(trajectory.final_answer or "")
    if answer is None:
        tail = (trajectory.final_answer or "")[-80:]
        return EvalOutcome(passed=False, reason=f"no 'Answer: ...' line in the reply (ends {tail!r})")
    if normalize(answer) in {normalize(a) for a in accepted}:
        return EvalOutcome(passed=True)
    return EvalOutcome(
        passed=False, reason=f"answer {answer!r} does not match {' / '.join(map(repr, accepted))}"
    )
