"""Where a vLLM engine's IPC sockets go: its own folder, named to vLLM only while it starts.

The real engine's side (sockets appear in the folder and go with ``shutdown``) is checked in
``tests/test_generator_real.py``; these pin the environment handling and the failed start.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from actors.generator import rpc_base_path


def test_the_folder_is_vllms_rpc_base_path_only_while_the_engine_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VLLM_RPC_BASE_PATH", raising=False)
    with rpc_base_path(str(tmp_path)):
        assert os.environ["VLLM_RPC_BASE_PATH"] == str(tmp_path)
    assert "VLLM_RPC_BASE_PATH" not in os.environ and tmp_path.is_dir()
    monkeypatch.setenv("VLLM_RPC_BASE_PATH", "/users/own")
    with rpc_base_path(str(tmp_path)):
        assert os.environ["VLLM_RPC_BASE_PATH"] == str(tmp_path)
    assert os.environ["VLLM_RPC_BASE_PATH"] == "/users/own"


def test_a_failed_start_removes_the_folder_and_restores_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_RPC_BASE_PATH", "/users/own")
    folder = tmp_path / "sockets"
    folder.mkdir()
    (folder / "a-socket").touch()
    with pytest.raises(RuntimeError, match="engine core"), rpc_base_path(str(folder)):
        raise RuntimeError("engine core initialization failed")
    assert not folder.exists() and os.environ["VLLM_RPC_BASE_PATH"] == "/users/own"
