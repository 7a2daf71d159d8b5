"""Step checkpoints: where they live, what the orchestrator saves next to the learner, resume.

Layout under the run's ``checkpoint_dir``::

    step-0004/            the learner's DeepSpeed checkpoint (weights, optimizer, RNG, version)
      hf/                 a loadable Hugging Face model (launch/eval.py takes it)
      progress.json       the orchestrator's progress, written last: a step directory without it
                          is incomplete (a run killed mid-save) and never resumed from

``progress.json`` holds the step, the policy version, the task stream's position after that step's
tasks were drawn, and the curation state. Resuming loads the learner, sends its weights to the
generator and continues at ``step + 1`` from that position: the same tasks in the same order, no
step repeated or skipped (in async placement the rollouts drawn ahead of the checkpoint are
discarded and drawn again, identically). Step 0 is the start of the RL steps, saved once the
warm start, the evals before training and curation's first profile are done: a run stopped before
its first step's checkpoint goes on from there instead of doing them again. With a KL reference
(``algorithm.kl_coef > 0``, ``kl_reference: base``) step 0 is never pruned: a resumed run's
reference is the policy its RL started from (``reference_dir``).
"""

from __future__ import annotations

import os
import re
import shutil
from typing import Any

import msgspec

PROGRESS = "progress.json"
_STEP_DIR = re.compile(r"^step-(\d{4,})$")


class Progress(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What a run needs besides the learner state to continue exactly."""

    step: int
    """The last step trained and checkpointed."""
    version: int
    """The learner's policy version after that step."""
    position: int
    """Task-stream position after that step's tasks were drawn."""
    curation: dict[str, Any] | None = None
    """``PassRateCurator.state_dict()`` when curation is on."""
    run_id: str = ""
    """The run that wrote it (for logs)."""


def step_dir(root: str, step: int) -> str:
    return os.path.join(root, f"step-{step:04d}")


def write_progress(directory: str, progress: Progress) -> None:
    """Write ``progress.json`` atomically: the checkpoint in ``directory`` is complete after this."""
    tmp = os.path.join(directory, f".{PROGRESS}.tmp")
    with open(tmp, "wb") as f:
        f.write(msgspec.json.format(msgspec.json.encode(progress)) + b"\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(directory, PROGRESS))


def read_progress(directory: str) -> Progress:
    """The progress of a step checkpoint; ``ValueError`` naming the file when absent or malformed."""
    path = os.path.join(directory, PROGRESS)
    try:
        with open(path, "rb") as f:
            return msgspec.json.decode(f.read(), type=Progress)
    except FileNotFoundError:
        raise ValueError(
            f"{path}: missing; {directory} is not a complete step checkpoint (expected a "
            "step-NNNN directory written by train.checkpoint_every)"
        ) from None
    except msgspec.ValidationError as e:
        raise ValueError(f"{path}: {e}") from None
    except msgspec.DecodeError as e:
        raise ValueError(f"{path}: not JSON ({e})") from None


def complete_steps(root: str) -> list[tuple[int, str]]:
    """``(step, directory)`` of every complete step checkpoint under ``root``, oldest first."""
    if not os.path.isdir(root):
        return []
    found = []
    for name in os.listdir(root):
        match = _STEP_DIR.match(name)
        path = os.path.join(root, name)
        if match and os.path.isfile(os.path.join(path, PROGRESS)):
            found.append((int(match[1]), path))
    return sorted(found)


def resolve_resume(resume: str | None, root: str) -> str | None:
    """The step checkpoint to resume from: ``None`` (fresh start), ``auto`` (the latest complete
    one under ``root``, or a fresh start) or a directory (must be complete)."""
    if resume is None:
        return None
    if resume == "auto":
        steps = complete_steps(root)
        return steps[-1][1] if steps else None
    read_progress(resume)  # refuse an incomplete or foreign directory now, with its path
    return resume


def reference_dir(root: str) -> str:
    """The model RL started from, as a resumed run's KL reference: ``step-0000``'s ``hf``."""
    path = os.path.join(step_dir(root, 0), "hf")
    if not os.path.isdir(path):
        raise ValueError(
            f"{path}: missing; a run with a KL reference resumes against the policy its RL started "
            "from, the step-0000 checkpoint (kept by train.checkpoint_every when algorithm.kl_coef > 0)"
        )
    return path


def prune(root: str, keep: int, keep_start: bool = False) -> list[str]:
    """Remove all but the ``keep`` latest complete step checkpoints (and ``step-0000``, the policy RL
    started from, with ``keep_start``); returns what was removed."""
    steps = [(step, path) for step, path in complete_steps(root) if not (keep_start and step == 0)]
    removed = [path for _, path in steps[: max(len(steps) - keep, 0)]]
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed
