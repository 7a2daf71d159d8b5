"""The evaluation's output: a table of ``mean±SE`` per domain, its JSON form, and a summary line.

Rows are ``policies.metrics.metrics_with_stderr`` output: ``{row: {metric: (mean, stderr)}}``, the
overall row (``all``) first.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import msgspec

from policies.metrics import OVERALL

COLUMNS: tuple[tuple[str, str, str], ...] = (
    # (metric key, header, format of the mean and of the standard error)
    ("success", "success", "{:.2f}"),
    ("tool_calls", "chain", "{:.2f}"),
    ("reasoning_tokens", "cot tok", "{:.1f}"),
    ("task_adoption", "task adopt", "{:.2f}"),
    ("tool_step_share", "tool steps", "{:.2f}"),
    ("gui_step_share", "gui steps", "{:.2f}"),
    ("reachable_adoption", "reach adopt", "{:.2f}"),
    ("false_success", "false succ", "{:.2f}"),
    ("hallucinated_tools", "halluc", "{:.2f}"),
    ("input_tokens", "input tok", "{:.0f}"),
)
"""The table's metric columns, after ``n`` (episodes) and ``tasks``; the JSON has every metric."""
OPTIONAL = frozenset({"gui_step_share", "reachable_adoption"})
"""Columns shown only when a row has the metric (a hybrid GUI + MCP domain)."""

Rows = Mapping[str, Mapping[str, tuple[float, float]]]


def format_table(rows: Rows) -> str:
    """One line per row (``all`` first), cells ``mean±SE``; ``-`` where a row has no such metric."""

    def cell(row: Mapping[str, tuple[float, float]], key: str, fmt: str) -> str:
        if key not in row:
            return "-"
        mean, se = row[key]
        return f"{fmt.format(mean)}±{fmt.format(se)}"

    def count(row: Mapping[str, tuple[float, float]], key: str) -> str:
        return f"{row[key][0]:.0f}" if key in row else "-"

    columns = [c for c in COLUMNS if c[0] not in OPTIONAL or any(c[0] in row for row in rows.values())]
    header = ["domain", "n", "tasks", *(h for _, h, _ in columns)]
    body = [
        [name, count(row, "episodes"), count(row, "tasks"), *(cell(row, k, f) for k, _, f in columns)]
        for name, row in rows.items()
    ]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    return "\n".join(
        "  ".join(
            f"{c:<{w}}" if i == 0 else f"{c:>{w}}" for i, (c, w) in enumerate(zip(line, widths, strict=True))
        )
        for line in [header, *body]
    )


def rows_json(rows: Rows) -> dict[str, dict[str, dict[str, float]]]:
    """``{row: {metric: {"mean": m, "stderr": s}}}``."""
    return {name: {k: {"mean": m, "stderr": s} for k, (m, s) in row.items()} for name, row in rows.items()}


def summary_line(runs: Mapping[str, Rows]) -> str:
    """``eval: greedy_success=0.50±0.29 ...``: the overall success and task adoption of each run."""
    parts = [
        f"{run}_{key}={row[key][0]:.2f}±{row[key][1]:.2f}"
        for run, rows in runs.items()
        for key in ("success", "task_adoption")
        if key in (row := rows[OVERALL])
    ]
    return "eval: " + " ".join(parts)


def write_json(path: str, document: Mapping[str, Any]) -> None:
    """Write ``document`` as indented JSON at ``path``, creating its directory."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "wb") as f:
        f.write(msgspec.json.format(msgspec.json.encode(document)) + b"\n")
