"""Shared pytest fixtures: anyio on asyncio, the demo model directory and its tokenizer."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
MODEL_DIR = Path(os.environ.get("MCPRL_TEST_MODEL", REPO / ".cache" / "models" / "SmolLM2-135M-Instruct"))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def model_dir() -> Path:
    """The converted SmolLM2 directory (`make test` fetches it first)."""
    if not (MODEL_DIR / "config.json").exists():
        message = f"demo model missing at {MODEL_DIR}; run `make model`"
        if os.environ.get("CI"):  # CI runs `make test`, which fetches it: missing is a failure there
            pytest.fail(message)
        pytest.skip(message)
    return MODEL_DIR


@pytest.fixture(scope="session")
def tokenizer(model_dir: Path) -> Any:
    """The demo model's tokenizer (modules that define their own fixture of this name use theirs)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


@pytest.fixture(scope="session")
def built_vlm(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small vision-language policy (``launch/build_vlm.py``) built from the demo model, once."""
    from launch.build_vlm import build

    return build(model_dir, tmp_path_factory.mktemp("vlm") / "SmolVLM-SmolLM2-135M")


@pytest.fixture(scope="session")
def vlm_dir(built_vlm: Path) -> Path:
    """The vision-language policy the vision tests run: ``built_vlm``, or ``MCPRL_TEST_VLM=<model
    dir>`` (a real VLM by path, e.g. on a GPU machine)."""
    return Path(os.environ.get("MCPRL_TEST_VLM") or built_vlm)


@pytest.fixture(scope="session")
def vision(vlm_dir: Path) -> Any:
    """The vision tests' model's image expansion and pixels (``policies.vision.ProcessorVision``)."""
    from policies.vision import ProcessorVision

    return ProcessorVision(vlm_dir)


@pytest.fixture(scope="session")
def vlm_tokenizer(vlm_dir: Path) -> Any:
    """The vision tests' model's tokenizer (its chat template renders image parts)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(vlm_dir)
