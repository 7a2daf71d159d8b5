"""Small objects many tests build: a finished episode that only has its final answer."""

from __future__ import annotations

from specs.trajectory import Trajectory


def answered(text: str | None = "done") -> Trajectory:
    """An episode whose whole content is its final answer ``text`` (``None``: it gave none)."""
    return Trajectory(
        task_id="t",
        group_id="g",
        token_ids=[],
        trainable=[],
        logprobs=[],
        versions=[],
        messages=[],
        final_answer=text,
    )
