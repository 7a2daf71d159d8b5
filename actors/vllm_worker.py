"""Both ends of an in-place weight update: the check before it, and the vLLM worker extension.

The learner writes one safetensors file in checkpoint format (Hugging Face tensor names, every
tensor including ``lm_head.weight`` even when the head is tied to the embeddings). The Generator
first checks that file against the model's own checkpoint (``check_update_file``, driver side,
reads only the headers), then asks every vLLM worker to load it through ``collective_rpc`` into
``WeightUpdateExtension.mcprl_reload_weights``, which vLLM mixes into its worker class when the
engine is built with ``worker_extension_cls=WORKER_EXTENSION``.

Why a file path and not tensors: ``collective_rpc`` arguments do not arrive as tensors, and a
safetensors file (``/dev/shm`` in practice) loads 135M parameters in about a second.

Why ``reload_weights(..., is_checkpoint_format=True)`` and not ``model.load_weights``: the CPU
runner repacks linear weights after loading, so a plain ``load_weights`` fails there; the reload
path restores checkpoint layout, loads, and re-runs that processing (GPU runners have it too).

This module imports neither torch nor vLLM at import time: the Generator imports it in the driver.
"""

from __future__ import annotations

import json
import logging
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

WORKER_EXTENSION = "actors.vllm_worker.WeightUpdateExtension"

# vLLM's in-place reload reports layers it could not fill and names it did not load only as
# warnings from loggers under this one; the extension listens here for the length of a reload.
_RELOAD_LOGGER = "vllm.model_executor.model_loader.reload"
_LAYER_FAILED = ": Failed to load weights"
_NOT_LOADED = "were not loaded"


def safetensors_names(path: str | Path) -> set[str]:
    """Tensor names in one safetensors file, read from its header only (no tensor data)."""
    with open(path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len))
    return {name for name in header if name != "__metadata__"}


def checkpoint_names(model_dir: str | Path) -> set[str]:
    """Tensor names of a Hugging Face model directory (single file or sharded with an index)."""
    root = Path(model_dir)
    index = root / "model.safetensors.index.json"
    if index.exists():
        return set(json.loads(index.read_text())["weight_map"])
    files = sorted(root.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in model directory {root}")
    return set().union(*(safetensors_names(f) for f in files))


def check_update_file(path: str | Path, base_names: set[str]) -> None:
    """Refuse an update file that would leave part of the served model stale.

    ``base_names`` are the tensors of the model's own checkpoint. The update must carry all of
    them, and ``lm_head.weight`` explicitly: a checkpoint of a tied model omits the head, and vLLM
    then keeps its old copy of it, silently serving a different policy than the learner's.
    """
    names = safetensors_names(path)
    missing = sorted((base_names | {"lm_head.weight"}) - names)
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise ValueError(
            f"weight update {path} lacks {len(missing)} tensor(s) the served model needs: {shown}; "
            "export every tensor in checkpoint format, lm_head.weight included even when tied"
        )


class _WarningCapture(logging.Handler):
    """Collects the reload warnings that mean a layer holding parameters kept its old weights.

    vLLM also warns for layers whose only tensors are derived buffers (``RotaryEmbedding``'s
    cos/sin cache), which no checkpoint carries and which stay valid: those are not stale.
    """

    def __init__(self, param_layers: set[str]) -> None:
        super().__init__(level=logging.WARNING)
        self.param_layers = param_layers
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if _NOT_LOADED in message:
            self.messages.append(message)
        elif message.endswith(_LAYER_FAILED) and message.split(":")[0] in self.param_layers:
            self.messages.append(message)


def _iter_tensors(path: str) -> Iterator[tuple[str, Any]]:
    from safetensors import safe_open

    with safe_open(path, framework="pt", device="cpu") as f:
        for name in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
            yield name, f.get_tensor(name)


class WeightUpdateExtension:
    """Mixed into vLLM's worker class; ``self`` is the worker (``model_runner`` and all)."""

    def mcprl_reload_weights(self, path: str) -> dict[str, Any]:
        """Load a checkpoint-format safetensors file into the live model, in place.

        Returns ``{"tensors": n, "seconds": s, "stale": [warnings]}``; a non-empty ``stale`` means
        some layer kept its old weights and the caller must not trust the engine's policy.
        """
        counted = 0

        def counting() -> Iterator[tuple[str, Any]]:
            nonlocal counted
            for item in _iter_tensors(path):
                counted += 1
                yield item

        model = self.model_runner.get_model()  # type: ignore[attr-defined]
        param_layers = {type(m).__name__ for m in model.modules() if any(True for _ in m.parameters(False))}
        capture = _WarningCapture(param_layers)
        reload_logger = logging.getLogger(_RELOAD_LOGGER)
        old_level = reload_logger.level
        if reload_logger.getEffectiveLevel() > logging.WARNING:
            # Warnings must reach the handler whatever VLLM_LOGGING_LEVEL says.
            reload_logger.setLevel(logging.WARNING)
        reload_logger.addHandler(capture)
        start = time.perf_counter()
        try:
            reload = getattr(self, "reload_weights", None)
            if reload is not None:
                reload(weights_iterator=counting(), is_checkpoint_format=True)
            else:  # vLLM builds without in-place reload: GPU weights load directly
                model.load_weights(weights=counting())
        finally:
            reload_logger.removeHandler(capture)
            reload_logger.setLevel(old_level)
        return {"tensors": counted, "seconds": time.perf_counter() - start, "stale": capture.messages}
