"""The observation rule as configured: which past tool observations the model sees in full.

Configuration only (``rollout.observation_rule``, ``launch/eval.py --observation-rule``); how it is
applied to a conversation, logged and replayed is ``policies.observations`` (paper 002, Eqs. 1-2).
"""

from __future__ import annotations

import msgspec

PLACEHOLDER = "[observation omitted]"


class ObservationRule(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One observation rule, shared by rollout, evaluation and training (the defaults change nothing)."""

    keep_last_costly: int | None = None
    """``k``: how many of the newest costly observations stay in full; ``None`` keeps all."""
    costly_chars: int = 1500
    """An observation whose body is longer than this (or that has an image) is costly."""
    placeholder_after_success: bool = False
    """Eq. 2's drop: replace the images of a successful call's observation by the placeholder."""
    placeholder_text: str = PLACEHOLDER
    """``π``; a short note of what was dropped follows it in parentheses."""

    def __post_init__(self) -> None:
        if self.keep_last_costly is not None and self.keep_last_costly < 1:
            raise ValueError(
                f"ObservationRule.keep_last_costly: expected None or >= 1 (k = 1 keeps the current "
                f"observation), got {self.keep_last_costly}"
            )
        if self.costly_chars < 0:
            raise ValueError(f"ObservationRule.costly_chars: expected >= 0, got {self.costly_chars}")
        if not self.placeholder_text.strip():
            raise ValueError("ObservationRule.placeholder_text: expected a non-blank placeholder")
