"""What the user sees: a per-step table on the terminal, a W&B run, trajectories as JSONL.

``Reporter.log(phase, step, metrics)`` prints one aligned row (the columns that matter), appends
every metric to ``<run_dir>/metrics.jsonl`` and logs it to W&B under ``<phase>/<name>``; ``write_trajectories`` writes one JSON object per
trajectory (token ids, masks, decoded text, tool-call records, the Evaluator's score) to
``<run_dir>/trajectories/``, the images tool results returned once each in its ``images/`` by hash.
W&B is offline unless the config says otherwise; ``wandb sync <run_dir>/wandb/...`` uploads later.
An offline run says so once, at ``close`` (``launch/console.py`` silences wandb's own notices).
"""

from __future__ import annotations

import base64
import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import msgspec

from specs.config import RunConfig, to_dict
from specs.trajectory import ImageRef, Trajectory

COLUMNS: tuple[tuple[str, str, str], ...] = (
    # (metric key, header, format)
    ("success", "success", "{:>7.2f}"),
    ("reward", "reward", "{:>6.2f}"),
    ("valid_call", "valid", "{:>5.2f}"),
    ("tool_adoption", "adopt", "{:>5.2f}"),
    ("tool_calls", "calls", "{:>5.2f}"),
    ("unparsed_calls", "unparsed", "{:>8.2f}"),
    ("truncated", "cut", "{:>4.2f}"),
    ("gen_tok_s", "gen tok/s", "{:>9.1f}"),
    ("engine_busy", "busy", "{:>4.2f}"),
    ("engine_open", "open", "{:>4.1f}"),
    ("loss", "loss", "{:>8.4f}"),
    ("grad_norm", "gnorm", "{:>6.2f}"),
    ("rollout_s", "rollout s", "{:>9.1f}"),
    ("update_s", "update s", "{:>8.1f}"),
    ("sync_s", "sync s", "{:>6.1f}"),
    ("max_live_envs", "live", "{:>4.0f}"),
    ("groups_dropped", "dropped", "{:>7.0f}"),
)


IMAGES = "images"
"""The folder beside the trajectories' JSONL files that holds their images by hash."""
EXTENSIONS = {"image/png": "png", "image/jpeg": "jpg", "image/gif": "gif", "image/webp": "webp"}


def image_path(folder: str, ref: ImageRef) -> str:
    """Where ``write_images`` puts the image ``ref``."""
    return os.path.join(folder, f"{ref.sha256}.{EXTENSIONS.get(ref.mime_type, 'bin')}")


def write_images(folder: str, t: Trajectory) -> None:
    """Each image of ``t``'s tool calls into ``folder`` by its hash, unless a file is there already."""
    for ref in (ref for call in t.tool_calls for ref in call.images):
        path = image_path(folder, ref)
        if not os.path.exists(path):
            os.makedirs(folder, exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "wb") as f:
                f.write(base64.b64decode(t.images[ref.sha256]))
            os.replace(tmp, path)  # whole or absent, whoever writes it first


class LogProgress:
    """Progress where no terminal shows a bar (a Ray job's log, output to a file): a line
    ``<description>: <done>/<total> after <m>m<ss>s`` once ``EVERY_S`` has passed since the last,
    and a last one at the end if any was printed; work shorter than ``EVERY_S`` prints nothing."""

    EVERY_S = 60.0

    def __init__(self, description: str, total: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.description, self.total, self.clock = description, total, clock
        self.done, self.printed = 0, False
        self.start = self.last = clock()

    def __call__(self, *_: Any, n: int = 1) -> None:
        self.done += n
        now = self.clock()
        if now - self.last >= self.EVERY_S or (self.printed and self.done >= self.total):
            elapsed = int(now - self.start)
            print(
                f"{self.description}: {self.done}/{self.total} after {elapsed // 60}m{elapsed % 60:02d}s",
                flush=True,
            )
            self.last, self.printed = now, True


class Reporter:
    def __init__(self, cfg: RunConfig, run_id: str) -> None:
        self.run_dir = cfg.run_dir
        self.trajectory_dir = os.path.join(self.run_dir, "trajectories")
        os.makedirs(self.trajectory_dir, exist_ok=True)
        self.metrics_path = os.path.join(self.run_dir, "metrics.jsonl")
        self._wandb: Any = None
        if cfg.wandb.mode != "disabled":
            import wandb

            with _one_traceback():
                self._wandb = wandb.init(
                    project=cfg.wandb.project,
                    entity=cfg.wandb.entity,
                    name=run_id,
                    mode=cfg.wandb.mode,
                    tags=list(cfg.wandb.tags),
                    group=cfg.wandb.group,
                    config=to_dict(cfg),
                    dir=self.run_dir,
                )
            self._wandb.define_metric("step")
            self._wandb.define_metric("*", step_metric="step")
        self._header_printed = False
        self._bars: Any = None  # the terminal's one live display of progress bars, while shown

    def log(self, phase: str, step: int, metrics: Mapping[str, float]) -> None:
        widths = [max(len(header), len(fmt.format(0.0))) for _, header, fmt in COLUMNS]
        if not self._header_printed:
            headers = (f"{header:>{w}}" for (_, header, _), w in zip(COLUMNS, widths, strict=True))
            print(f"{'phase':<15}{'step':>5} " + " ".join(headers), flush=True)
            self._header_printed = True
        cells = []
        for (key, _, fmt), width in zip(COLUMNS, widths, strict=True):
            value = metrics.get(key)
            cells.append(f"{fmt.format(value) if value is not None else '-':>{width}}")
        print(f"{phase:<15}{step:>5} " + " ".join(cells), flush=True)
        record = {"phase": phase, "step": step, **metrics}
        with open(self.metrics_path, "ab") as f:
            f.write(msgspec.json.encode(record) + b"\n")
        if self._wandb is not None:
            self._wandb.log({"step": step, **{f"{phase}/{k}": v for k, v in metrics.items()}})

    def write_trajectories(self, name: str, trajectories: Iterable[Trajectory], tokenizer: Any) -> str:
        """``trajectories/<name>.jsonl``, one trajectory a line with its decoded ``text``; the tool
        results' images go to ``trajectories/images/<sha256>.<ext>``, each file written once for
        the whole run, and a line keeps only their refs (``tool_calls[].images``)."""
        path = os.path.join(self.trajectory_dir, f"{name}.jsonl")
        encoder = msgspec.json.Encoder()
        with open(path, "wb") as f:
            for t in trajectories:
                write_images(os.path.join(self.trajectory_dir, IMAGES), t)
                record = msgspec.to_builtins(t)
                del record["images"]
                record["text"] = tokenizer.decode(t.token_ids, skip_special_tokens=False)
                f.write(encoder.encode(record) + b"\n")
        return path

    @contextlib.contextmanager
    def progress(self, description: str, total: int) -> Iterator[Callable[..., None]]:
        """A progress bar on a terminal (a ``LogProgress`` line a minute in a job log); yields
        ``advance(n=1)``. Bars opened while another is shown (an eval inside the RL steps, curation
        while a step samples) join the same display: a terminal has one live display."""
        if not sys.stdout.isatty():
            yield LogProgress(description, total)
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        owner = self._bars is None
        if owner:
            columns = (
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
            )
            self._bars = Progress(*columns, transient=True)
            self._bars.start()
        bars = self._bars
        assert bars is not None
        task = bars.add_task(description, total=total)
        try:
            yield lambda *_, n=1: bars.advance(task, n)
        finally:
            bars.remove_task(task)
            if owner:
                bars.stop()
                self._bars = None

    def summary(self, values: Mapping[str, float]) -> None:
        if self._wandb is not None:
            self._wandb.summary.update(dict(values))

    def close(self) -> None:
        if self._wandb is not None:
            offline = self._wandb.settings.mode in ("offline", "dryrun")
            sync_dir = os.path.relpath(self._wandb.sync_dir)
            self._wandb.finish()
            if offline:
                print(f"wandb: offline run; upload it with `wandb sync {sync_dir}`", flush=True)
            self._wandb = None


@contextlib.contextmanager
def _one_traceback() -> Iterator[None]:
    """Around ``wandb.init``: wandb's excepthook prints a traceback and then calls the hook it found,
    unless that is Python's own; Ray's (installed on ``import ray``) prints it again. With Python's
    hook in place while wandb installs its own, a run that fails shows its traceback once."""
    before = sys.excepthook
    sys.excepthook = sys.__excepthook__
    try:
        yield
    finally:
        if sys.excepthook is sys.__excepthook__:  # wandb installed nothing (its service was up already)
            sys.excepthook = before
