"""What a vision-language policy needs beyond a tokenizer: how an image becomes tokens, and pixels.

A chat template writes one *placeholder* per image part of a message (SmolVLM/Idefics3: ``<image>``;
Qwen2-VL: ``<|image_pad|>``); the model's processor *expands* each into the tokens the vision
features replace (Idefics3 at 256 px, one tile: ``<fake_token_around_image><global-img>``, 16
``<image>``, ``<fake_token_around_image>``). ``ProcessorVision`` asks the model's own processor for
that expansion, image by image, so the recorder (``policies.tokens``) writes exactly the tokens the
processor would, the generator hands vLLM the placeholders back to expand (and checks that vLLM's
expansion is the same, ``actors.generator``), and the learner feeds the same pixels at the same
tokens (``pixels``).

Which models: any whose directory holds a processor with an ``image_token`` and a config with a
``vision_config`` (``is_multimodal``); tested with Idefics3 (``launch/build_vlm.py``'s model).
``pixels`` returns the image processor's tensors for all images of a micro-batch as one sample,
the layout Idefics3 (and models that flatten their images, like Qwen2-VL) read in token order.

transformers and PIL load inside the methods: importing this module stays instant.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol


class VisionError(ValueError):
    """An image or a model directory a vision-language policy cannot use."""


class ImageTokens(Protocol):
    """How a chat template's image placeholder becomes the model's tokens (the recorder's seam)."""

    placeholder: str
    """The text the chat template writes for one image part."""
    placeholder_ids: tuple[int, ...]
    """Its tokens (what a vLLM prompt holds in place of an expanded image)."""

    def expand(self, data: bytes) -> list[int]:
        """The tokens the model's processor writes for this image in place of the placeholder."""
        ...


def is_multimodal(model_path: str | Path) -> bool:
    """Whether the model directory is a vision-language model (its config has a ``vision_config``)."""
    config = Path(model_path) / "config.json"
    try:
        return "vision_config" in json.loads(config.read_text())
    except (OSError, ValueError):
        return False


def decode_image(data: bytes, where: str = "image") -> Any:
    """``data`` (PNG, JPEG, ...) as an RGB PIL image; ``VisionError`` naming ``where`` if it is not one."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:
            return image.convert("RGB")
    except (UnidentifiedImageError, OSError) as e:
        raise VisionError(f"{where}: {len(data)} bytes that are not an image PIL can read ({e})") from e


def image_bytes(store: dict[str, str], sha256: str, where: str) -> bytes:
    """The decoded bytes of image ``sha256`` in ``store`` (base64 by SHA-256, ``Trajectory.images``)."""
    if sha256 not in store:
        raise VisionError(f"{where}: image {sha256[:12]}... is not among the {len(store)} images held")
    return base64.b64decode(store[sha256])


class ProcessorVision:
    """``ImageTokens`` and pixel values from a model directory's own processor (``AutoProcessor``)."""

    def __init__(self, model_path: str | Path) -> None:
        from transformers import AutoProcessor

        self.model_path = str(model_path)
        self.processor = AutoProcessor.from_pretrained(self.model_path)  # type: ignore[no-untyped-call]
        token = getattr(self.processor, "image_token", None)
        if not token:
            raise VisionError(
                f"{self.model_path}: its processor has no image_token; not a vision-language model"
            )
        self.placeholder = str(token)
        tokenizer = self.processor.tokenizer
        self.placeholder_ids = tuple(tokenizer.encode(self.placeholder, add_special_tokens=False))
        self._expanded: dict[str, list[int]] = {}

    def expand(self, data: bytes) -> list[int]:
        key = hashlib.sha256(data).hexdigest()
        if key not in self._expanded:
            out = self.processor(text=self.placeholder, images=[decode_image(data)], add_special_tokens=False)
            self._expanded[key] = [int(i) for i in out["input_ids"][0]]
        return list(self._expanded[key])

    def pixels(self, images: Sequence[bytes]) -> dict[str, Any]:
        """The image processor's tensors (``pixel_values``, ...) for ``images`` in token order, as one sample."""
        decoded = [decode_image(data, f"image {i}") for i, data in enumerate(images)]
        out = self.processor.image_processor(images=[decoded], return_tensors="pt")
        return dict(out)


def load_vision(model_path: str | Path) -> ProcessorVision | None:
    """The model's ``ProcessorVision`` when it is a vision-language model, else ``None``."""
    return ProcessorVision(model_path) if is_multimodal(model_path) else None
