"""Generate the swe domain's tasks: a bug planted in a small project, reported as an issue.

``python -m specs.domains.swe.generate`` rewrites ``tasks/train.json`` and ``tasks/eval.json``
deterministically (seed 0; a test checks the shipped files equal a fresh generation). For each cell
(project, mutation kind) the candidate sites of ``mutate.sites`` are shuffled by a seeded RNG and
tried in that order; a mutant is **kept** only when, run by ``/usr/bin/python3`` through
``testrun.py`` (3 s limit):

- at least one hidden test fails (the task is scoreable and the bug is real), and
- at least one probe of ``hidden/<project>/probes.json`` changes its result (the issue text can
  show the symptom: a call, what it gave, what was expected).

The project's visible suite may pass or fail: a bug the visible tests miss is harder (the agent
must reproduce it from the report), which raises the difficulty. Mutants that hang are dropped.

Splits: train draws the projects ``intervals``, ``csvlite``, ``calendar`` with every kind but
``negated_condition``; eval holds 8 new mutants of those cells, 6 ``negated_condition`` mutants
(a kind never in train) and 10 mutants of ``statkit`` (a project never in train). Difficulty
(``_difficulty``: easy / medium / hard) adds the kind's weight, 1 when the visible tests still pass,
and 1 for a project over 190 source lines.

Private fields: ``_project``, ``_file``, ``_mutation`` (kind, file, line, the exact original and
mutated lines, a description), ``_hidden_failing`` (unittest ids), ``_visible_passes``,
``_difficulty``, ``_symptoms`` (the probes quoted).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from specs.domains.swe import catalog
from specs.domains.swe.mutate import KINDS, Mutation, sites
from specs.domains.swe.testrun import MARKER
from specs.task_files import write_task_files

TRAIN_PROJECTS = ("intervals", "csvlite", "calendar")
HELDOUT_PROJECTS = ("statkit",)
HELDOUT_KINDS = ("negated_condition",)
TRAIN_KINDS = tuple(k for k in KINDS if k not in HELDOUT_KINDS)
N_TRAIN, N_EVAL_SEEN, N_EVAL_KIND, N_EVAL_PROJECT = 72, 8, 6, 10
PYTHON = "/usr/bin/python3"
KIND_WEIGHT = {
    "wrong_operator": 1,
    "wrong_default": 1,
    "off_by_one_constant": 2,
    "off_by_one_compare": 2,
    "off_by_one_index": 2,
    "swapped_arguments": 2,
    "negated_condition": 2,
    "missing_case": 3,
}
OUTPUT_FORMAT = "When the bug is fixed, reply with a short summary of the change (no tool call)."


def run_tests(project_dir: Path, request: dict[str, Any], timeout_s: float = 3.0) -> dict[str, Any] | None:
    """``testrun.py``'s report for the project in ``project_dir``, or ``None`` if it hangs or crashes.
    Its temp dir is one of ours, removed even when the runner is killed at ``timeout_s``."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    try:
        with tempfile.TemporaryDirectory(prefix="swe-run-") as temp:
            done = subprocess.run(
                [PYTHON, "-c", catalog.runner_source()],
                input=json.dumps(request),
                capture_output=True,
                text=True,
                cwd=project_dir,
                env=env | {"TMPDIR": temp},
                timeout=timeout_s,
            )
    except subprocess.TimeoutExpired:
        return None
    lines = [line for line in done.stdout.splitlines() if line.startswith(MARKER + " ")]
    return json.loads(lines[-1][len(MARKER) + 1 :]) if lines else None


class Project:
    """One project's pristine files, its baseline probe results and a scratch copy to test mutants in."""

    def __init__(self, name: str, scratch: Path) -> None:
        self.name = name
        self.files = catalog.files(name)
        self.probes = catalog.probes(name)
        self.request = {"hidden": catalog.hidden_tests(name), "visible": True, "probes": self.probes}
        self.dir = scratch / name
        self._write(None)
        baseline = run_tests(self.dir, self.request)
        if baseline is None or baseline["hidden_failing"] or not baseline["visible_ok"]:
            raise RuntimeError(
                f"swe project {name}: the pristine project does not pass its tests: {baseline}"
            )
        self.baseline: list[str] = baseline["probes"]
        self.lines = catalog.source_lines(name)
        self.sites = [m for rel in catalog.source_files(name) for m in sites(self.files[rel].decode(), rel)]

    def _write(self, mutation: Mutation | None) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
        for rel, data in self.files.items():
            path = self.dir / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if mutation is not None and rel == mutation.file:
                data = mutation.apply(data.decode()).encode()
            path.write_bytes(data)

    def candidates(self, kind: str, seed: int) -> list[Mutation]:
        found = [m for m in self.sites if m.kind == kind]
        random.Random(f"{seed}:{self.name}:{kind}").shuffle(found)
        return found

    def validate(self, mutation: Mutation) -> dict[str, Any] | None:
        self._write(mutation)
        report = run_tests(self.dir, self.request)
        self._write(None)
        if report is None or not report["hidden_failing"] or "probes" not in report:
            return None
        changed = [
            (expr, want, got)
            for expr, want, got in zip(self.probes["exprs"], self.baseline, report["probes"], strict=False)
            if want != got
        ]
        return {**report, "changed": changed} if changed else None


def _symptom(expr: str, want: str, got: str, rng: random.Random) -> str:
    if got.startswith("raises ") and want.startswith("raises "):
        return f"`{expr}` raises `{got[7:]}`, but I expected it to raise `{want[7:]}`."
    if got.startswith("raises "):
        return rng.choice(
            (
                f"`{expr}` raises `{got[7:]}`; I expected it to return `{want}`.",
                f"Calling `{expr}` crashes with `{got[7:]}` instead of returning `{want}`.",
            )
        )
    if want.startswith("raises "):
        return rng.choice(
            (
                f"`{expr}` returns `{got}` instead of raising `{want[7:]}`.",
                f"`{expr}` should be refused with `{want[7:]}`, but it quietly returns `{got}`.",
            )
        )
    return rng.choice(
        (
            f"`{expr}` returns `{got}`, but I expected `{want}`.",
            f"I get `{got}` from `{expr}`; the right answer is `{want}`.",
            f"`{expr}` gives `{got}` where it should give `{want}`.",
        )
    )


def _instruction(project: str, changed: list[tuple[str, str, str]], rng: random.Random) -> str:
    shown = sorted(rng.sample(range(len(changed)), min(2, len(changed))))
    lines = [_symptom(*changed[i], rng) for i in shown]
    opener = rng.choice(
        (
            f"I think I found a bug in `{project}`.",
            f"Bug report for `{project}`:",
            f"Something is off in `{project}`.",
            f"While using `{project}` I hit a wrong result.",
        )
    )
    setup = catalog.probes(project)["setup"].replace("\n", "; ")
    return (
        f"{opener} With `{setup}`:\n\n"
        + "\n".join(f"- {line}" for line in lines)
        + f"\n\nThe `{project}` project is checked out in the current directory. Please find and fix the bug in "
        "its source code (do not change the tests). `make test` runs the project's tests."
    )


def _difficulty(kind: str, visible_passes: bool, lines: int) -> str:
    score = KIND_WEIGHT[kind] + int(visible_passes) + int(lines > 190)
    return "easy" if score <= 2 else "medium" if score == 3 else "hard"


def _task(
    instance_id: str, project: Project, mutation: Mutation, report: dict[str, Any], rng: random.Random
) -> dict[str, Any]:
    visible_passes = bool(report["visible_ok"])
    return {
        "instance_id": instance_id,
        "category": f"swe/{mutation.kind}",
        "instruction": _instruction(project.name, report["changed"], rng),
        "output_format": OUTPUT_FORMAT,
        "use_specified_server": True,
        "mcp_servers": [{"name": "shell"}],
        "dockerfile_path": catalog.DOCKERFILE,
        "build_args": {"PROJECT": project.name},
        "prepares": [
            {
                "prepare_func": "swe.checkout",
                "prepare_args": {
                    "project": project.name,
                    "file": mutation.file,
                    "line": mutation.line,
                    "original": mutation.original,
                    "mutated": mutation.mutated,
                },
            }
        ],
        "evaluators": [
            {
                "func": "raw",
                "op": "swe.hidden_tests",
                "op_args": {"project": project.name},
                "desc": "The project's hidden tests pass in the environment after the episode.",
            }
        ],
        "_project": project.name,
        "_file": mutation.file,
        "_mutation": mutation.to_json(),
        "_hidden_failing": report["hidden_failing"],
        "_visible_passes": visible_passes,
        "_difficulty": _difficulty(mutation.kind, visible_passes, project.lines),
        "_symptoms": [list(c) for c in report["changed"][:3]],
    }


def _draw(
    projects: dict[str, Project],
    cells: list[tuple[str, str]],
    n: int,
    prefix: str,
    seed: int,
    used: set[tuple[str, str, int, str]],
    queues: dict[tuple[str, str], list[Mutation]],
) -> list[dict[str, Any]]:
    """``n`` tasks, round robin over ``cells`` (project, kind); a cell that runs dry is skipped."""
    rng = random.Random(f"{seed}:{prefix}")
    tasks: list[dict[str, Any]] = []
    live = list(cells)
    i = 0
    while len(tasks) < n and live:
        cell = live[i % len(live)]
        queue = queues.setdefault(cell, projects[cell[0]].candidates(cell[1], seed))
        kept = None
        while queue and kept is None:
            mutation = queue.pop(0)
            key = (cell[0], mutation.file, mutation.line, mutation.mutated)
            if key in used:
                continue
            report = projects[cell[0]].validate(mutation)
            if report is not None:
                used.add(key)
                kept = (mutation, report)
        if kept is None:
            live.remove(cell)
            continue
        tasks.append(_task(f"{prefix}-{len(tasks):04d}", projects[cell[0]], *kept, rng))
        i += 1
    if len(tasks) < n:
        raise RuntimeError(f"{prefix}: only {len(tasks)} of {n} mutants survive the tests")
    return tasks


def generate(seed: int = 0) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(train, eval) task dicts."""
    with tempfile.TemporaryDirectory(prefix="swe-generate-") as scratch:
        projects = {name: Project(name, Path(scratch)) for name in (*TRAIN_PROJECTS, *HELDOUT_PROJECTS)}
        used: set[tuple[str, str, int, str]] = set()
        queues: dict[tuple[str, str], list[Mutation]] = {}
        seen = [(p, k) for k in TRAIN_KINDS for p in TRAIN_PROJECTS]
        train = _draw(projects, seen, N_TRAIN, "swe-train", seed, used, queues)
        eval_seen = _draw(projects, seen[::-1], N_EVAL_SEEN, "swe-eval-seen", seed, used, queues)
        kind_cells = [(p, k) for k in HELDOUT_KINDS for p in TRAIN_PROJECTS]
        eval_kind = _draw(projects, kind_cells, N_EVAL_KIND, "swe-eval-kind", seed, used, queues)
        project_cells = [(p, k) for k in KINDS for p in HELDOUT_PROJECTS]
        eval_project = _draw(projects, project_cells, N_EVAL_PROJECT, "swe-eval-project", seed, used, queues)
    return train, eval_seen + eval_kind + eval_project


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=catalog.DOMAIN / "tasks")
    args = parser.parse_args(argv)
    train, evals = generate(args.seed)
    write_task_files(args.out, {"train.json": train, "eval.json": evals})
    print(f"wrote {len(train)} train and {len(evals)} eval tasks to {args.out}")


if __name__ == "__main__":
    main()
