"""Module sizes across the five layers: each module's line count, then the median and the max.

    python -m launch.module_sizes [--root DIR] [--limit N]

Counts every ``*.py`` file under ``specs``, ``rewards``, ``policies``, ``actors`` and ``launch``
(benches included) as ``wc -l`` would; empty files (the bare ``__init__.py`` package markers) are
not modules with code and are left out of the list and the statistics. Prints one ``lines path``
row per module, largest last, then ``modules``, ``median`` and ``max``. Exits 1, naming each
module, when one is over ``--limit`` lines (default ``MAX_LINES``, the house rule in
CONVENTIONS.md: split a module over 500 lines). ``tests/test_module_sizes.py`` holds the suite
to the same limit. Standard library only.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

PACKAGES = ("specs", "rewards", "policies", "actors", "launch")
MAX_LINES = 500


def module_sizes(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, int]:
    """Line count of every non-empty module under ``root/<package>``, keyed by its path from ``root``."""
    sizes: dict[str, int] = {}
    for package in packages:
        base = root / package
        if not base.is_dir():
            raise FileNotFoundError(f"module sizes: package directory {base} does not exist")
        for path in sorted(base.rglob("*.py")):
            lines = len(path.read_text(encoding="utf-8").splitlines())
            if lines:
                sizes[path.relative_to(root).as_posix()] = lines
    return sizes


def oversized(sizes: dict[str, int], limit: int = MAX_LINES) -> dict[str, int]:
    """The modules of ``sizes`` longer than ``limit`` lines."""
    return {path: lines for path, lines in sizes.items() if lines > limit}


def report(sizes: dict[str, int]) -> str:
    """One ``lines path`` row per module (smallest first), then the module count, median and max."""
    if not sizes:
        raise ValueError("module sizes: no modules to report (is the root the repository root?)")
    rows = [f"{lines:5d} {path}" for path, lines in sorted(sizes.items(), key=lambda kv: (kv[1], kv[0]))]
    counts = list(sizes.values())
    rows.append(f"modules {len(counts)}  median {statistics.median(counts):g}  max {max(counts)}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Line count of every module in the five layers.")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--limit", type=int, default=MAX_LINES)
    args = parser.parse_args(argv)
    sizes = module_sizes(args.root)
    print(report(sizes))
    over = oversized(sizes, args.limit)
    for path, lines in sorted(over.items()):
        print(f"{path}: {lines} lines, over the limit of {args.limit}: split it", file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
