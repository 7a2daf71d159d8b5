"""The learner's weights on disk: the vLLM export and the DeepSpeed checkpoint with its HF model.

Contract:

- ``full_state_dict`` gives every weight as its own contiguous CPU tensor in the model dtype, with
  ``lm_head.weight`` present even when tied to the embeddings (MACHINE_NOTES, "tied embeddings
  trap"); under ZeRO-3 the shards are gathered first.
- ``export_weights`` writes that state dict as one safetensors file, atomically (write, rename),
  with the policy version in its metadata.
- ``save_checkpoint`` writes DeepSpeed's checkpoint (weights, optimizer, the version and torch's
  RNG state as client state) and a loadable HF model in ``dir/hf`` (the base model directory's
  non-weight files, tokenizer and chat template, copied beside it); ``load_checkpoint`` restores
  it and returns the version, refusing a directory without one, naming it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from typing import TYPE_CHECKING, Any

from actors.learner_batch import LearnerError

if TYPE_CHECKING:
    import torch

# Files of a model directory that are weights; everything else (tokenizer, chat template,
# generation config) is copied next to the HF export of a checkpoint so it loads on its own.
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf", ".index.json")


def full_state_dict(module: Any, zero_stage: int) -> dict[str, torch.Tensor]:
    """Every weight of ``module`` as its own contiguous CPU tensor, ``lm_head.weight`` included."""
    import deepspeed

    gather: Any = contextlib.nullcontext()
    if zero_stage == 3:
        gather = deepspeed.zero.GatheredParameters(list(module.parameters()), modifier_rank=None)
    with gather:
        # copy=True: tied tensors become independent copies (safetensors refuses shared storage).
        state = {k: v.detach().to("cpu", copy=True).contiguous() for k, v in module.state_dict().items()}
        head = module.get_output_embeddings()
        if "lm_head.weight" not in state and head is not None:
            state["lm_head.weight"] = head.weight.detach().to("cpu", copy=True).contiguous()
    return state


def export_weights(state: dict[str, torch.Tensor], path: str, version: int) -> str:
    """Write ``state`` as safetensors at ``path`` (atomically, via a rename); returns ``path``."""
    from safetensors.torch import save_file

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    save_file(state, tmp, metadata={"format": "pt", "version": str(version)})
    os.replace(tmp, path)
    return path


def save_checkpoint(engine: Any, dir: str, version: int, zero_stage: int, model_path: str) -> None:
    """DeepSpeed checkpoint of ``engine`` in ``dir`` and the HF model in ``dir/hf`` (module docstring)."""
    import torch

    client_state = {"version": version, "torch_rng": torch.get_rng_state()}
    engine.save_checkpoint(dir, tag=f"version{version}", client_state=client_state)
    hf_dir = os.path.join(dir, "hf")
    engine.module.save_pretrained(hf_dir, state_dict=full_state_dict(engine.module, zero_stage))
    for name in os.listdir(model_path):
        src = os.path.join(model_path, name)
        if os.path.isfile(src) and name != "config.json" and not name.endswith(_WEIGHT_SUFFIXES):
            shutil.copy2(src, os.path.join(hf_dir, name))


def load_checkpoint(engine: Any, dir: str) -> int:
    """Restore ``engine`` (weights, optimizer) and torch's RNG from the latest checkpoint in ``dir``;
    returns the checkpoint's policy version."""
    import torch

    load_path, client_state = engine.load_checkpoint(dir)
    if load_path is None:
        raise LearnerError(f"load_checkpoint: no DeepSpeed checkpoint in {dir} (expected a 'latest' file)")
    if not client_state or "version" not in client_state:
        raise LearnerError(f"load_checkpoint: checkpoint {load_path} has no 'version' in its client state")
    if "torch_rng" in client_state:
        torch.set_rng_state(client_state["torch_rng"])
    return int(client_state["version"])
