"""Step checkpoint directories: complete ones only, resume resolution, pruning, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from launch.checkpoints import (
    Progress,
    complete_steps,
    prune,
    read_progress,
    reference_dir,
    resolve_resume,
    step_dir,
    write_progress,
)


def checkpoint(root: Path, step: int, *, complete: bool = True) -> str:
    directory = step_dir(str(root), step)
    Path(directory).mkdir(parents=True)
    if complete:
        write_progress(directory, Progress(step=step, version=step + 20, position=4 * step))
    return directory


def test_only_complete_step_checkpoints_count_and_auto_picks_the_latest(tmp_path: Path) -> None:
    checkpoint(tmp_path, 2)
    latest = checkpoint(tmp_path, 10)
    checkpoint(tmp_path, 11, complete=False)  # killed mid-save: no progress.json
    (tmp_path / "hf").mkdir()
    assert [step for step, _ in complete_steps(str(tmp_path))] == [2, 10]
    assert resolve_resume("auto", str(tmp_path)) == latest
    assert read_progress(latest) == Progress(step=10, version=30, position=40)


def test_auto_without_checkpoints_is_a_fresh_start_and_none_never_resumes(tmp_path: Path) -> None:
    assert resolve_resume("auto", str(tmp_path / "nothing")) is None
    checkpoint(tmp_path, 1)
    assert resolve_resume(None, str(tmp_path)) is None


def test_resuming_from_an_incomplete_or_malformed_directory_names_the_file(tmp_path: Path) -> None:
    incomplete = checkpoint(tmp_path, 3, complete=False)
    with pytest.raises(ValueError, match=r"progress.json: missing; .* is not a complete step checkpoint"):
        resolve_resume(incomplete, str(tmp_path))
    bad = checkpoint(tmp_path, 4)
    Path(bad, "progress.json").write_text('{"step": "four"}')
    with pytest.raises(ValueError, match=r"step-0004/progress.json: Expected `int`"):
        read_progress(bad)
    Path(bad, "progress.json").write_text("{not json")
    with pytest.raises(ValueError, match="not JSON"):
        read_progress(bad)


def test_prune_keeps_the_latest_complete_checkpoints(tmp_path: Path) -> None:
    for step in (1, 2, 3):
        checkpoint(tmp_path, step)
    partial = checkpoint(tmp_path, 4, complete=False)
    removed = prune(str(tmp_path), keep=2)
    assert [Path(p).name for p in removed] == ["step-0001"]
    assert [step for step, _ in complete_steps(str(tmp_path))] == [2, 3]
    assert Path(partial).exists()  # an incomplete one is not a checkpoint: left for the next save


def test_prune_keeps_the_start_of_rl_when_asked(tmp_path: Path) -> None:
    for step in (0, 1, 2, 3):
        checkpoint(tmp_path, step)
    assert [Path(p).name for p in prune(str(tmp_path), keep=1, keep_start=True)] == ["step-0001", "step-0002"]
    assert [step for step, _ in complete_steps(str(tmp_path))] == [0, 3]
    with pytest.raises(ValueError, match="step-0000"):
        reference_dir(str(tmp_path))  # the test's checkpoints hold no hf model
    (tmp_path / "step-0000" / "hf").mkdir()
    assert reference_dir(str(tmp_path)) == str(tmp_path / "step-0000" / "hf")
