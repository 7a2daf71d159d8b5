"""What the user sees: a per-step table on the terminal, a W&B run, trajectories as JSONL.

``Reporter.log(phase, step, metrics)`` prints one aligned row (the columns that matter) and logs
every metric to W&B under ``<phase>/<name>``; ``write_trajectories`` writes one JSON object per
trajectory (token ids, masks, decoded text, tool calls, reward) to ``<run_dir>/trajectories/``.
W&B is offline unless the config says otherwise; ``wandb sync <run_dir>/wandb/...`` uploads later.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from policies.types import Trajectory
from specs.config import RunConfig, to_dict

COLUMNS: tuple[tuple[str, str, str], ...] = (
    # (metric key, header, format)
    ("success", "success", "{:>7.2f}"),
    ("reward", "reward", "{:>6.2f}"),
    ("valid_call", "valid", "{:>5.2f}"),
    ("tool_adoption", "adopt", "{:>5.2f}"),
    ("tool_calls", "calls", "{:>5.2f}"),
    ("gen_tok_s", "gen tok/s", "{:>9.1f}"),
    ("loss", "loss", "{:>8.4f}"),
    ("rollout_s", "rollout s", "{:>9.1f}"),
    ("update_s", "update s", "{:>8.1f}"),
    ("sync_s", "sync s", "{:>6.1f}"),
    ("max_live_envs", "live", "{:>4.0f}"),
    ("groups_dropped", "dropped", "{:>7.0f}"),
)


class Reporter:
    def __init__(self, cfg: RunConfig, run_id: str) -> None:
        self.run_dir = cfg.run_dir
        self.trajectory_dir = os.path.join(self.run_dir, "trajectories")
        os.makedirs(self.trajectory_dir, exist_ok=True)
        self._wandb: Any = None
        if cfg.wandb.mode != "disabled":
            import wandb

            self._wandb = wandb.init(
                project=cfg.wandb.project,
                entity=cfg.wandb.entity,
                name=run_id,
                mode=cfg.wandb.mode,
                tags=list(cfg.wandb.tags),
                config=to_dict(cfg),
                dir=self.run_dir,
            )
            self._wandb.define_metric("step")
            self._wandb.define_metric("*", step_metric="step")
        self._header_printed = False

    def log(self, phase: str, step: int, metrics: Mapping[str, float]) -> None:
        if not self._header_printed:
            print(f"{'phase':<10}{'step':>5} " + " ".join(h for _, h, _ in COLUMNS), flush=True)
            self._header_printed = True
        cells = []
        for key, header, fmt in COLUMNS:
            value = metrics.get(key)
            cells.append(fmt.format(value) if value is not None else " " * (len(header) - 1) + "-")
        print(f"{phase:<10}{step:>5} " + " ".join(cells), flush=True)
        if self._wandb is not None:
            self._wandb.log({"step": step, **{f"{phase}/{k}": v for k, v in metrics.items()}})

    def write_trajectories(self, name: str, trajectories: Iterable[Trajectory], tokenizer: Any) -> str:
        path = os.path.join(self.trajectory_dir, f"{name}.jsonl")
        encoder = msgspec.json.Encoder()
        with open(path, "wb") as f:
            for t in trajectories:
                record = msgspec.to_builtins(t)
                record["text"] = tokenizer.decode(t.token_ids, skip_special_tokens=False)
                f.write(encoder.encode(record) + b"\n")
        return path

    def summary(self, values: Mapping[str, float]) -> None:
        if self._wandb is not None:
            self._wandb.summary.update(dict(values))

    def close(self) -> None:
        if self._wandb is not None:
            self._wandb.finish()
