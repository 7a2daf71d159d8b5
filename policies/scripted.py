"""A scripted policy that implements the ``Engine`` protocol honestly.

It decodes the prompt it is given, asks a ``respond`` function what to say, and returns that text
as the tokenizer's canonical ids plus eos, exactly as a real engine would return sampled tokens
(logprob 0.0: the script is deterministic). It is used for expert demonstrations (the warm start
runs an expert through the very same pipeline as RL) and as the fake generator in tests.

A ``respond`` function is domain logic, named in the run config by import string, e.g.
``specs.domains.calculator.expert:respond``; it gets the task and the conversation so far.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from policies.types import Generation, PromptImage, SamplingConfig

Respond = Callable[[Any, str], str]
"""``respond(task, conversation_text) -> next assistant message``."""


class ScriptedEngine:
    """Engine for one task: ``generate`` returns what ``respond`` says, tokenized exactly."""

    def __init__(self, tokenizer: Any, respond: Respond, task: Any, *, version: int = 0) -> None:
        self._tokenizer = tokenizer
        self._respond = respond
        self._task = task
        self.version = version
        self.calls = 0

    async def generate(
        self, prompt_ids: list[int], sampling: SamplingConfig, images: Sequence[PromptImage] = ()
    ) -> Generation:
        conversation = self._tokenizer.decode(prompt_ids, skip_special_tokens=False)
        text = self._respond(self._task, conversation)
        ids = list(self._tokenizer.encode(text, add_special_tokens=False))
        self.calls += 1
        finish: Literal["stop", "length"] = "stop"
        if len(ids) >= sampling.max_tokens:
            ids, finish = ids[: sampling.max_tokens], "length"
        else:
            ids.append(self._tokenizer.eos_token_id)
        return Generation(
            token_ids=ids, logprobs=[0.0] * len(ids), version=self.version, finish_reason=finish
        )

    async def update_weights(self, version: int, path: str) -> None:
        self.version = version
