"""Layout check: no module of the five layers is over 500 lines, and the median is under 150
(``launch/module_sizes.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from launch.module_sizes import MAX_LINES, PACKAGES, main, module_sizes, oversized, report

REPO = Path(__file__).resolve().parent.parent


def _tree(root: Path, files: dict[str, int]) -> None:
    for name, lines in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"x{i} = {i}\n" for i in range(lines)))


def test_no_module_in_specs_rewards_policies_actors_or_launch_is_over_500_lines() -> None:
    sizes = module_sizes(REPO)
    assert sizes, f"no modules found under {REPO} in {PACKAGES}"
    over = oversized(sizes, MAX_LINES)
    assert not over, f"modules over {MAX_LINES} lines (split them): " + ", ".join(
        f"{path} ({lines})" for path, lines in sorted(over.items())
    )


def test_the_median_module_stays_under_150_lines() -> None:
    # the house style (CONVENTIONS.md): small modules; a split that leaves two big halves shows here
    sizes = sorted(module_sizes(REPO).values())
    middle = len(sizes) // 2
    median = sizes[middle] if len(sizes) % 2 else (sizes[middle - 1] + sizes[middle]) / 2
    assert median < 150, f"median module is {median} lines over {len(sizes)} modules; expected < 150"


def test_sizes_count_lines_per_module_and_leave_out_empty_package_markers(tmp_path: Path) -> None:
    _tree(tmp_path, {"a/__init__.py": 0, "a/one.py": 3, "a/sub/two.py": 7, "b/three.py": 10})
    sizes = module_sizes(tmp_path, ("a", "b"))
    assert sizes == {"a/one.py": 3, "a/sub/two.py": 7, "b/three.py": 10}
    assert report(sizes).splitlines()[-1] == "modules 3  median 7  max 10"


def test_a_missing_package_directory_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="nope"):
        module_sizes(tmp_path, ("nope",))


def test_the_script_exits_1_and_names_each_module_over_the_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _tree(tmp_path, {f"{package}/m.py": 2 for package in PACKAGES})
    _tree(tmp_path, {"actors/big.py": 6})
    assert main(["--root", str(tmp_path), "--limit", "5"]) == 1
    err = capsys.readouterr().err
    assert "actors/big.py: 6 lines, over the limit of 5" in err
    assert "m.py" not in err
    assert main(["--root", str(tmp_path), "--limit", "6"]) == 0
