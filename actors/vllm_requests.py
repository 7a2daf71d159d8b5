"""One vLLM request, both ways: the token prompt that goes in, and the checks on what comes back.

``token_prompt`` builds vLLM's input from a recorded prompt: the token ids as they are, or, with
images, each image's expanded tokens folded back to its placeholder (vLLM expands token prompts
itself) plus the decoded images. ``check_expansion`` then refuses a turn whose prompt vLLM
expanded otherwise than the recorder did, and ``sampled_logprobs`` reads the sampled token's own
logprob at each position of vLLM's flat logprobs. Every refusal is a ``GeneratorError`` naming the
request.

Importing this module imports neither vLLM nor torch: they load inside ``token_prompt``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from policies.types import PromptImage
from specs.errors import MCPRLError


class GeneratorError(MCPRLError):
    """A generation request the engine could not serve as asked."""


def token_prompt(
    request_id: str, prompt_ids: list[int], images: Sequence[PromptImage], *, multimodal: bool, model: str
) -> Any:
    """vLLM's input: the token prompt, with each image folded back to its placeholder and the
    images as multimodal data; ``GeneratorError`` for images sent to a text model or undecodable."""
    from vllm.inputs import TokensPrompt

    if not images:
        return TokensPrompt(prompt_token_ids=list(prompt_ids))
    if not multimodal:
        raise GeneratorError(f"request {request_id}: {len(images)} image(s) for the text model {model}")
    from policies.vision import VisionError, decode_image

    folded = fold_images(request_id, prompt_ids, images)
    try:
        pixels = [
            decode_image(image.data, f"request {request_id}: image {k}") for k, image in enumerate(images)
        ]
    except VisionError as e:
        raise GeneratorError(str(e)) from e
    return TokensPrompt(prompt_token_ids=folded, multi_modal_data={"image": pixels})


def fold_images(request_id: str, prompt_ids: list[int], images: Sequence[PromptImage]) -> list[int]:
    """``prompt_ids`` with each image's expanded tokens folded back to its placeholder (what vLLM
    expands itself); ``GeneratorError`` for images out of order or out of the prompt."""
    folded: list[int] = []
    at = 0
    for k, image in enumerate(images):
        if image.start < at or image.length < 1 or image.start + image.length > len(prompt_ids):
            raise GeneratorError(
                f"request {request_id}: image {k} at tokens [{image.start}, {image.start + image.length}) "
                f"overlaps the previous one, is empty or runs past the {len(prompt_ids)}-token prompt"
            )
        folded += [*prompt_ids[at : image.start], *image.placeholder]
        at = image.start + image.length
    return folded + prompt_ids[at:]


def check_expansion(request_id: str, recorded: list[int], expanded: Any) -> None:
    """Refuse a turn whose prompt vLLM expanded otherwise than the recorder did (the model's processor)."""
    expanded = list(expanded or [])
    if expanded != list(recorded):
        first = next((i for i, (a, b) in enumerate(zip(expanded, recorded, strict=False)) if a != b), None)
        first = min(len(expanded), len(recorded)) if first is None else first
        raise GeneratorError(
            f"request {request_id}: vLLM expanded the images into a {len(expanded)}-token prompt, the "
            f"recorder into {len(recorded)} tokens (first difference at {first}); the model's processor "
            "and vLLM's disagree, so the turn's context is not the recorded one"
        )


def sampled_logprobs(request_id: str, token_ids: list[int], flat: Any) -> list[float]:
    """The sampled token's logprob at each position of vLLM's ``FlatLogprobs`` (``logprobs=0``)."""
    if flat is None or len(flat) != len(token_ids):
        got = None if flat is None else len(flat)
        raise GeneratorError(f"request {request_id}: {got} logprob positions for {len(token_ids)} tokens")
    out: list[float] = []
    for i, token in enumerate(token_ids):
        start, end = flat.start_indices[i], flat.end_indices[i]
        if end - start != 1 or flat.token_ids[start] != token:
            raise GeneratorError(
                f"request {request_id}: logprobs at position {i} are not those of sampled token {token}"
            )
        out.append(flat.logprobs[start])
    return out
