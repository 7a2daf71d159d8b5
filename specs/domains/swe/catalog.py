"""The swe domain's projects as data: their files, a tar of them, their hidden tests and probes.

A project is a directory ``projects/<name>/`` (a package, its ``tests/`` in ``unittest`` style, a
``Makefile`` whose ``make test`` runs them, a README); its hidden tests live outside it, in
``hidden/<name>/check_*.py``, with ``hidden/<name>/probes.json`` (``{"setup": "<imports>",
"probes": ["<expression>", ...]}``: the calls an issue text may quote). ``__pycache__`` is never
part of a project. Everything here reads the domain's own directory; nothing touches an environment.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

DOMAIN = Path(__file__).resolve().parent
PROJECTS = DOMAIN / "projects"
HIDDEN = DOMAIN / "hidden"
DOCKERFILE = "specs/domains/swe/projects/Dockerfile"
"""``dockerfile_path`` of every task, relative to the project root (where runs start)."""
IMAGE_PROJECT = "/opt/swe/project"
"""Where the domain image holds the pristine project (``projects/Dockerfile``)."""


def names() -> list[str]:
    return sorted(p.name for p in PROJECTS.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))


def _root(name: str) -> Path:
    root = PROJECTS / name
    if not root.is_dir():
        raise ValueError(f"swe project {name!r}: no directory {root}; known: {', '.join(names())}")
    return root


def files(name: str) -> dict[str, bytes]:
    """Relative path -> content of every file of project ``name`` (sorted, no caches)."""
    root = _root(name)
    found = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if path.is_file() and "__pycache__" not in rel.parts and path.suffix != ".pyc":
            found[rel.as_posix()] = path.read_bytes()
    return found


def source_files(name: str) -> list[str]:
    """The package modules a mutation may touch (not tests, not ``__init__.py``)."""
    return [
        rel
        for rel in files(name)
        if rel.endswith(".py") and not rel.startswith("tests/") and not rel.endswith("__init__.py")
    ]


def source_lines(name: str) -> int:
    return sum(len(files(name)[rel].splitlines()) for rel in source_files(name))


def tar_bytes(name: str) -> bytes:
    """An uncompressed tar of the project (deterministic: fixed mtimes and owners)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for rel, data in files(name).items():
            info = tarfile.TarInfo(rel)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def hidden_tests(name: str) -> dict[str, str]:
    """File name -> source of the project's hidden tests (``check_*.py``)."""
    folder = HIDDEN / name
    found = {p.name: p.read_text(encoding="utf-8") for p in sorted(folder.glob("check_*.py"))}
    if not found:
        raise ValueError(f"swe project {name!r}: no hidden tests check_*.py in {folder}")
    return found


def probes(name: str) -> dict[str, Any]:
    """``{"setup": str, "exprs": [str, ...]}`` from ``hidden/<name>/probes.json``."""
    raw = json.loads((HIDDEN / name / "probes.json").read_text(encoding="utf-8"))
    return {"setup": raw["setup"], "exprs": list(raw["probes"])}


def runner_source() -> str:
    """The source of ``testrun.py``, sent into an environment as ``python3 -c``."""
    return (DOMAIN / "testrun.py").read_text(encoding="utf-8")
