"""launch/console.py: what reaches the terminal and what only the run log, in the driver and in a worker."""

from __future__ import annotations

import importlib
import logging
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from launch.console import (
    LOG_ENV,
    VERBOSE_ENV,
    adopt_library_loggers,
    configure_console,
    quiet_environment,
    ray_init_options,
)
from launch.report import _one_traceback

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def restore_logging(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test leaves the root logger, warnings capture and the quieting variables as it found them."""
    for key in quiet_environment():
        monkeypatch.setenv(key, "placeholder")  # recorded, so the teardown restores the original
        monkeypatch.delenv(key)
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    for handler in root.handlers[:]:
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)
    logging.captureWarnings(False)


def test_a_library_warning_goes_to_the_log_file_and_not_the_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = configure_console(str(tmp_path / "run"), verbose=False)
    logging.getLogger("somelib.engine").warning("NUMA binding: using MEMBIND")
    assert "MEMBIND" not in capsys.readouterr().err
    assert log == str(tmp_path / "run" / "run.log")
    assert "WARNING somelib.engine" in Path(log).read_text()


def test_a_warning_from_our_own_logger_reaches_the_terminal_and_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = configure_console(str(tmp_path), verbose=False)
    logging.getLogger("actors.rollout").warning("trajectory of t-1 lost: env died")
    assert "WARNING actors.rollout: trajectory of t-1 lost" in capsys.readouterr().err
    assert "trajectory of t-1 lost" in Path(log).read_text()


def test_an_error_from_any_logger_reaches_the_terminal_but_our_info_does_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = configure_console(str(tmp_path), verbose=False)
    logging.getLogger("somelib").error("engine core died")
    logging.getLogger("launch.train").info("step 1 sampled")
    err = capsys.readouterr().err
    assert "ERROR somelib: engine core died" in err
    assert "step 1 sampled" not in err
    assert "step 1 sampled" in Path(log).read_text()


def test_python_warnings_go_to_the_log_file_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = configure_console(str(tmp_path), verbose=False)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("`reduce_op` is deprecated", FutureWarning, stacklevel=1)
    assert "reduce_op" not in capsys.readouterr().err
    assert "FutureWarning: `reduce_op` is deprecated" in Path(log).read_text()


def test_verbose_shows_library_warnings_and_our_info_on_the_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = configure_console(str(tmp_path), verbose=True)
    logging.getLogger("somelib").warning("Triton has no CPU backend")
    logging.getLogger("actors.env_pool").info("prewarmed 2 environments")
    err = capsys.readouterr().err
    assert "WARNING somelib: Triton has no CPU backend" in err
    assert "INFO actors.env_pool: prewarmed 2 environments" in err
    assert "Triton" in Path(log).read_text()
    assert "WANDB_SILENT" not in os.environ


def test_quiet_mode_silences_wandb_unless_the_user_set_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    configure_console(str(tmp_path), verbose=False)
    assert os.environ["WANDB_SILENT"] == "true"
    monkeypatch.setenv("WANDB_SILENT", "false")
    configure_console(str(tmp_path), verbose=False)
    assert os.environ["WANDB_SILENT"] == "false"


def test_a_second_configuration_replaces_the_first_instead_of_doubling_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_console(str(tmp_path / "a"), verbose=False)
    log = configure_console(str(tmp_path / "b"), verbose=False)
    logging.getLogger("policies.react").warning("bad tool call")
    assert capsys.readouterr().err.count("bad tool call") == 1
    assert Path(log).read_text().count("bad tool call") == 1
    assert "bad tool call" not in (tmp_path / "a" / "run.log").read_text()


def test_a_library_logger_with_its_own_stderr_handler_is_handed_to_the_run_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lib = logging.getLogger("selfish_lib")  # as transformers and Ray do on import
    lib.addHandler(logging.StreamHandler(sys.stderr))
    lib.propagate = False
    try:
        log = configure_console(str(tmp_path), verbose=False)
        adopt_library_loggers(("selfish_lib", "never_imported_lib"))
        lib.warning("advisory: use_cache is deprecated")
        assert "use_cache" not in capsys.readouterr().err
        assert "use_cache" in Path(log).read_text()
        assert "never_imported_lib" not in logging.Logger.manager.loggerDict
    finally:
        lib.handlers.clear()
        lib.propagate = True


def test_ray_options_keep_forwarding_and_name_an_importable_worker_hook(tmp_path: Path) -> None:
    options = ray_init_options(str(tmp_path / "run.log"), verbose=False)
    assert options["log_to_driver"] is True and options["configure_logging"] is False
    env = options["runtime_env"]["env_vars"]
    assert env[LOG_ENV] == str(tmp_path / "run.log") and env[VERBOSE_ENV] == "0"
    assert env["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"
    module, _, name = options["runtime_env"]["worker_process_setup_hook"].rpartition(".")
    assert callable(getattr(importlib.import_module(module), name))
    assert "WANDB_SILENT" not in ray_init_options("x.log", verbose=True)["runtime_env"]["env_vars"]


WORKER = """
import logging, os, sys, warnings
from launch.console import setup_worker
setup_worker()
print("vllm INFO chatter")
sys.stdout.flush()
os.write(2, b"[W utils.cpp:68] NUMA binding\\n")
warnings.warn("reduce_op is deprecated", FutureWarning)
logging.getLogger("deepspeed").warning("Setting accelerator to CPU")
logging.getLogger("actors.env_pool").info("created env-1")
logging.getLogger("actors.env_pool").warning("env-1 died; episode lost")
subprocess_out = __import__("subprocess").run([sys.executable, "-c", "print('engine core says hi')"])
"""


def run_worker(tmp_path: Path, verbose: bool) -> tuple[subprocess.CompletedProcess[str], Path]:
    log = tmp_path / "run" / "run.log"
    env = {**os.environ, LOG_ENV: str(log), VERBOSE_ENV: "1" if verbose else "0", "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", WORKER], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    return done, log


def test_a_worker_sends_everything_to_the_run_log_and_only_our_warnings_to_ray(tmp_path: Path) -> None:
    done, log = run_worker(tmp_path, verbose=False)
    assert done.stdout == ""
    assert done.stderr.strip() == "WARNING actors.env_pool: env-1 died; episode lost"
    text = log.read_text()
    for line in (
        "vllm INFO chatter",
        "NUMA binding",
        "reduce_op is deprecated",
        "Setting accelerator",
        "created env-1",
        "episode lost",
        "engine core says hi",
    ):
        assert line in text, line


def test_a_verbose_worker_keeps_its_output_on_the_terminal(tmp_path: Path) -> None:
    done, log = run_worker(tmp_path, verbose=True)
    assert "vllm INFO chatter" in done.stdout and "engine core says hi" in done.stdout
    assert "NUMA binding" in done.stderr and "INFO actors.env_pool: created env-1" in done.stderr
    assert not log.exists()


def test_a_worker_outside_a_configured_run_is_left_alone(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != LOG_ENV}
    code = "from launch.console import setup_worker; setup_worker(); print('plain')"
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout == "plain\n"


def test_wandb_excepthook_setup_leaves_the_previous_hook_when_wandb_installs_none() -> None:
    def ray_like_hook(*_: object) -> None:
        pass

    before = sys.excepthook
    sys.excepthook = ray_like_hook
    try:
        with _one_traceback():
            assert sys.excepthook is sys.__excepthook__  # what wandb sees, so it chains to nothing
        assert sys.excepthook is ray_like_hook
    finally:
        sys.excepthook = before
