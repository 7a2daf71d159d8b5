"""Every recorded episode under ``tests/data/episodes/`` replays (``tests/episodes.py``): its tokens
rebuild exactly, its model turns fed back drive the same tool calls through the real servers in a
fresh environment, and the evaluator gives the recorded verdicts. A domain adds its fixture with
``python -m tests.episodes --config launch/configs/<domain>.yaml --task <id> --out <file>``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.episodes import load, replay

pytestmark = pytest.mark.anyio
REPO = Path(__file__).resolve().parent.parent
RECORDINGS = sorted((REPO / "tests" / "data" / "episodes").glob("*.json"))


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.stem)
async def test_a_recorded_episode_replays_token_for_token_with_its_verdict(
    path: Path, tmp_path: Path, tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    recording = load(path)
    assert recording.trajectory.score is not None and recording.trajectory.tool_calls
    assert await replay(recording, recording.backend, tmp_path / "envs", tokenizer) == []


async def test_a_tampered_recording_is_caught(
    tmp_path: Path, tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replay can fail: a recorded verdict that the evaluator does not give is reported."""
    monkeypatch.chdir(REPO)
    recording = load(REPO / "tests" / "data" / "episodes" / "calculator-eval-seen-0000.json")
    score = recording.trajectory.score
    assert score is not None
    flipped = [type(v)(func=v.func, op=v.op, passed=not v.passed, message=v.message) for v in score.verdicts]
    recording.trajectory.score = type(score)(
        verdicts=tuple(flipped), success=not score.success, task=1 - score.task
    )
    ids = recording.trajectory.token_ids
    recording.trajectory.token_ids = [ids[0] + 1, *ids[1:]]  # the prompt's first token: not the model's
    problems = await replay(recording, recording.backend, tmp_path / "envs", tokenizer)
    assert any(p.startswith("verdicts differ") for p in problems)
    assert any(p.startswith("score differs") for p in problems)
    assert any(p.startswith("tokens: replay of") for p in problems)  # the messages rebuild other tokens
    assert any(p.startswith("replayed tokens differ") for p in problems)  # so does the fresh episode


async def test_a_volatile_recording_still_catches_a_changed_observation(
    tmp_path: Path, tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recording with volatile patterns (the browser's timestamped file names) is compared on its
    messages with those blanked: any other change to an observation is still reported."""
    monkeypatch.chdir(REPO)
    recording = load(REPO / "tests" / "data" / "episodes" / "gui-eval-heldout-0000.json")
    assert recording.volatile
    tool_message = next(
        m for m in recording.trajectory.messages if "Page Title: Inventory" in str(m["content"])
    )
    tool_message["content"] = str(tool_message["content"]).replace(
        "Page Title: Inventory", "Page Title: Other"
    )
    problems = await replay(recording, recording.backend, tmp_path / "envs", tokenizer)
    assert any(p.startswith("replayed messages differ") for p in problems), problems
