"""The one engine seam: token ids in, one sampled model turn out.

The agent loop (``policies.react``) drives anything with this method: the vLLM generator
(``actors.generator.VllmEngine`` and its Ray actor), the supervisor over it, the scripted expert
(``policies.scripted.ScriptedEngine``) and the benches' simulated engine. It is runtime-checkable
(``isinstance`` sees that the method exists, not its signature). What the training loop calls on top
(weights, version, sleep) is the generator's own seam (``actors.generator.GeneratorHandle``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from policies.types import Generation, PromptImage, SamplingConfig


@runtime_checkable
class Engine(Protocol):
    async def generate(
        self, prompt_ids: list[int], sampling: SamplingConfig, images: Sequence[PromptImage] = ()
    ) -> Generation:
        """Sample one turn continuing ``prompt_ids``; the tokens exactly as sampled, with logprobs.
        ``images``: a vision-language policy's images in the prompt, each where its expanded
        tokens sit in ``prompt_ids`` (``PromptImage``); a text engine gets none."""
        ...
