"""The learner's input: ``TrainSample`` batches checked, cut into micro-batches and padded.

Contract:

- ``validate`` refuses, naming the sample and what was expected, a sample that cannot be batched
  (token ids, trainable flags and logprobs of unequal or zero length, longer than the model takes,
  ids outside its vocabulary, images out of place, without pixels, on trainable tokens or given to a
  text model) or, when ``scored``, trained on (a trainable token 0 has no prefix).
- ``collate`` right-pads to the longest sequence of the micro-batch. Pads are masked out of
  attention (``attn``) and of the loss (``mask``); ``old`` holds the rollout logprobs; each reward
  family's sequence advantage is broadcast over its own tokens (paper 000, eqs. 9-10; a sample's
  ``token_advantages``, when given, replace the tool family's broadcast):
  ``integrated`` attribution puts both on every trainable token, ``masked`` puts the reasoning
  advantage on the reasoning tokens and the tool advantage on the others. A vision-language
  model's images (``vision``) add the processor's pixel tensors (``pixel_values``, ...) for all
  images of the micro-batch in token order, which the model's forward takes (``model_inputs``).

Importing this module imports torch only for type checking (the learner module stays instant).
"""

from __future__ import annotations

import base64
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Literal

from policies.types import TrainSample
from specs.errors import MCPRLError

if TYPE_CHECKING:
    import torch

    from policies.vision import ProcessorVision

Batch = dict[str, "torch.Tensor"]
"""A collated micro-batch: ``ids``, ``attn``, ``mask``, ``old``, ``adv_reasoning``, ``adv_tool``,
``seq`` (each token's sequence within its row), and a vision-language model's pixel tensors."""
PIXEL_KEYS = ("pixel_values", "pixel_attention_mask", "image_grid_thw")
"""The image processor's outputs a vision-language model's forward takes (Idefics3, Qwen2-VL)."""


def model_inputs(batch: Batch) -> dict[str, torch.Tensor]:
    """The batch's pixel tensors, as the model's forward names them (none for a text batch)."""
    return {k: batch[k] for k in PIXEL_KEYS if k in batch}


class LearnerError(MCPRLError):
    """A batch, dtype or checkpoint the learner cannot use."""


def chunks(items: Sequence[TrainSample], size: int) -> Iterator[Sequence[TrainSample]]:
    """``items`` in consecutive slices of at most ``size``."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def validate(
    samples: Sequence[TrainSample],
    where: str,
    *,
    model_path: str,
    max_seq_len: int | None,
    vocab_size: int,
    scored: bool = True,
    multimodal: bool = False,
) -> None:
    """Refuse, naming the sample, what cannot be batched (or, when ``scored``, trained on)."""
    for i, s in enumerate(samples):
        _validate_images(s, f"{where}: sample {i}", model_path, multimodal)
        n = len(s.token_ids)
        if n == 0 or len(s.trainable) != n or len(s.logprobs) != n:
            raise LearnerError(
                f"{where}: sample {i} has {n} token ids, {len(s.trainable)} trainable flags and "
                f"{len(s.logprobs)} logprobs; expected equal non-zero lengths"
            )
        for name, values in (("token advantages", s.token_advantages), ("sequence indices", s.sequences)):
            if values and len(values) != n:
                raise LearnerError(
                    f"{where}: sample {i} has {len(values)} {name} for {n} token ids; "
                    "expected one per token (or none)"
                )
        if s.sequences and min(s.sequences) < 0:
            raise LearnerError(f"{where}: sample {i} has a negative sequence index; expected 0, 1, ...")
        if max_seq_len is not None and n > max_seq_len:
            raise LearnerError(
                f"{where}: sample {i} is {n} tokens long; the model {model_path} takes at most "
                f"{max_seq_len} (max_position_embeddings)"
            )
        if vocab_size and not 0 <= min(s.token_ids) <= max(s.token_ids) < vocab_size:
            raise LearnerError(
                f"{where}: sample {i} has token ids outside [0, {vocab_size}), the vocabulary of {model_path}"
            )
        if scored and s.trainable[0]:
            raise LearnerError(
                f"{where}: sample {i} marks token 0 trainable; the first token has no prefix to score it"
            )


def _validate_images(s: TrainSample, where: str, model_path: str, multimodal: bool) -> None:
    if s.images and not multimodal:
        raise LearnerError(f"{where} has {len(s.images)} image(s) but {model_path} is a text model")
    end = 0
    for k, span in enumerate(s.images):
        if span.start < end or span.start + span.length > len(s.token_ids):
            raise LearnerError(
                f"{where}: image {k} at tokens [{span.start}, {span.start + span.length}) overlaps the "
                f"previous one or runs past the sample's {len(s.token_ids)} tokens"
            )
        if any(s.trainable[span.start : span.start + span.length]):
            raise LearnerError(f"{where}: image {k}'s tokens are marked trainable; image tokens never are")
        if span.sha256 not in s.image_data:
            raise LearnerError(f"{where}: image {k} ({span.sha256[:12]}...) has no pixels in image_data")
        end = span.start + span.length


def sequence_count(samples: Sequence[TrainSample]) -> int:
    """How many sequences ``samples`` hold that have a trainable token (what the seq-mean losses
    divide by): a row's distinct ``sequences`` indices among its trainable tokens, else one."""
    count = 0
    for s in samples:
        if s.sequences:
            count += len({q for q, t in zip(s.sequences, s.trainable, strict=True) if t})
        else:
            count += any(s.trainable)
    return count


def collate(
    samples: Sequence[TrainSample],
    attribution: Literal["integrated", "masked"],
    device: torch.device,
    vision: ProcessorVision | None = None,
) -> Batch:
    """Right-pad ``samples`` into one micro-batch on ``device`` (see the module docstring);
    ``vision``: the model's processor, for a vision-language model's images."""
    import torch

    width = max(len(s.token_ids) for s in samples)
    ids = torch.zeros(len(samples), width, dtype=torch.long)
    attn = torch.zeros(len(samples), width, dtype=torch.long)
    mask = torch.zeros(len(samples), width, dtype=torch.float32)
    old = torch.zeros(len(samples), width, dtype=torch.float32)
    reasoning = torch.zeros(len(samples), width, dtype=torch.float32)
    sequences = torch.zeros(len(samples), width, dtype=torch.long)
    for row, s in enumerate(samples):
        n = len(s.token_ids)
        ids[row, :n] = torch.tensor(s.token_ids)
        attn[row, :n] = 1
        mask[row, :n] = torch.tensor(s.trainable, dtype=torch.float32)
        old[row, :n] = torch.tensor(s.logprobs, dtype=torch.float32)
        if s.reasoning:
            reasoning[row, :n] = torch.tensor(s.reasoning, dtype=torch.float32)
        if s.sequences:
            sequences[row, :n] = torch.tensor(s.sequences)
    adv_tool = torch.tensor([s.advantage for s in samples], dtype=torch.float32).unsqueeze(-1)
    if any(s.token_advantages for s in samples):  # rows of several steps, each its own advantage
        adv_tool = adv_tool.expand(len(samples), width).clone()
        for row, s in enumerate(samples):
            if s.token_advantages:
                adv_tool[row, : len(s.token_advantages)] = torch.tensor(s.token_advantages)
    adv_reason = torch.tensor([s.reasoning_advantage for s in samples], dtype=torch.float32).unsqueeze(-1)
    if attribution == "masked":
        reason_tokens, action_tokens = mask * reasoning, mask * (1 - reasoning)
    else:
        reason_tokens, action_tokens = mask, mask
    tensors = {
        "ids": ids,
        "attn": attn,
        "mask": mask,
        "old": old,
        "adv_reasoning": adv_reason * reason_tokens,
        "adv_tool": adv_tool * action_tokens,
        "seq": sequences,
    }
    images = [base64.b64decode(s.image_data[span.sha256]) for s in samples for span in s.images]
    if images:
        if vision is None:
            raise LearnerError(
                f"a micro-batch with {len(images)} image(s) and no vision processor to read them"
            )
        tensors |= {k: v for k, v in vision.pixels(images).items() if k in PIXEL_KEYS}
    return {k: v.to(device) for k, v in tensors.items()}
