"""A quiet terminal: the run's table, progress bars and errors on screen, everything else in ``<run_dir>/run.log``.

Contract:

- ``configure_console(run_dir, verbose) -> log_path`` (the driver, once, before Ray and the ML imports
  run their course): Python logging gets a file handler on ``<run_dir>/run.log`` (every logger, INFO and
  above) and a terminal handler on stderr that shows our own loggers (``actors``, ``policies``,
  ``rewards``, ``specs``, ``launch``, ``__main__``) at WARNING and above and any logger at ERROR and
  above; ``warnings.warn`` goes through logging (``py.warnings``), so a library's FutureWarning lands in
  the file. It sets the environment the libraries read (``quiet_environment``). ``verbose=True``: the
  terminal handler shows every logger at INFO, the libraries' environment is left as it is.
- ``ray_init_options(log_path, verbose) -> dict``: keyword arguments for ``ray.init``. Every Ray worker of
  the job runs ``setup_worker`` first (``runtime_env.worker_process_setup_hook``): its file descriptors 1
  and 2 (and so those of the processes it starts: vLLM's engine core, MCP servers) are appended to the
  run log; a copy of the original stderr, which Ray forwards to the driver's terminal
  (``log_to_driver``), carries only the records the terminal handler above would show. Call it after
  ``import ray`` (and the other ML imports), right before ``ray.init``: it also hands the loggers of
  libraries imported since ``configure_console`` (Ray's own, transformers') to the run's handlers.
  ``verbose=True``: workers keep their output on the terminal, as Ray does by default.
- ``setup_worker()``: that hook; a no-op in a process without ``MCPRL_RUN_LOG`` in its environment.

The run log is one file appended to by every process of the run on this node (a worker on another
node appends to the same path on its own disk); lines from different processes interleave.
Exceptions raised by an actor reach the driver, which raises them: they are never only in the file.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, TextIO

RUN_LOG = "run.log"
OWN_PACKAGES = ("actors", "policies", "rewards", "specs", "launch", "__main__")
LOG_ENV = "MCPRL_RUN_LOG"
"""The run log's path, in the environment of every Ray worker of the run."""
VERBOSE_ENV = "MCPRL_CONSOLE_VERBOSE"
LIBRARY_LOGGERS = ("ray", "transformers")
"""Libraries that give their logger a stderr handler of its own and stop propagation on import."""
FILE_FORMAT = "%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s"
TERMINAL_FORMAT = "%(levelname)s %(name)s: %(message)s"
_MARK = "_mcprl_console"  # on the handlers this module installs, so a second call replaces them


def quiet_environment() -> dict[str, str]:
    """The variables that quiet libraries at their source (set where the user has not set them):
    ``WANDB_SILENT`` (wandb prints nothing; ``Reporter`` prints the offline notice once),
    ``HF_HUB_DISABLE_PROGRESS_BARS`` (transformers' "Loading weights" bars, hundreds of lines a load)."""
    return {"WANDB_SILENT": "true", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}


def is_own(record: logging.LogRecord) -> bool:
    """Whether a record comes from this project's code (its logger is in one of our packages)."""
    return record.name.split(".", 1)[0] in OWN_PACKAGES


def shown_on_terminal(record: logging.LogRecord) -> bool:
    """The quiet terminal's rule: our own WARNING and above, anybody's ERROR and above."""
    return record.levelno >= logging.ERROR or (record.levelno >= logging.WARNING and is_own(record))


class _Stderr(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record is emitted (rich's live display swaps it)."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _: Any) -> None:
        pass


class _ForwardedToRay(logging.StreamHandler):
    """A worker's copy of the stderr that Ray forwards to the driver. Before its first record it names
    the actor the way Ray's core worker does (``:actor_name:<class>``, in the file it no longer
    writes to), so the driver shows ``(EnvPool pid=N) WARNING ...`` as for the actor's own output."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        self._announced = False

    def emit(self, record: logging.LogRecord) -> None:
        if not self._announced:
            self._announced = True
            if name := _actor_class_name():
                self.stream.write(f":actor_name:{name}\n")
        super().emit(record)


def _actor_class_name() -> str | None:
    ray = sys.modules.get("ray")  # a Ray worker has imported it; a plain process has no actor
    if ray is None:
        return None
    try:
        actor = ray.get_runtime_context().current_actor
        return str(actor._ray_actor_creation_function_descriptor.class_name)
    except Exception:  # not in an actor, or Ray changed its handle: the line keeps a plain (pid=N)
        return None


def _install(handlers: list[logging.Handler], level: int = logging.INFO) -> None:
    root = logging.getLogger()
    for handler in [h for h in root.handlers if getattr(h, _MARK, False)]:
        root.removeHandler(handler)
        handler.close()
    for handler in handlers:
        setattr(handler, _MARK, True)
        root.addHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(True)


def adopt_library_loggers(names: tuple[str, ...] = LIBRARY_LOGGERS) -> None:
    """Take the terminal handlers off the loggers of already-imported libraries and let their records
    propagate to the run's handlers (a library not imported yet is left alone)."""
    for name in names:
        if name not in logging.Logger.manager.loggerDict:
            continue
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler):
                logger.removeHandler(handler)
        logger.propagate = True


def configure_console(run_dir: str, verbose: bool) -> str:
    """Route this process's logging as the module docstring says; returns the run log's path."""
    os.makedirs(run_dir, exist_ok=True)
    log_path = os.path.abspath(os.path.join(run_dir, RUN_LOG))
    to_file = logging.FileHandler(log_path, mode="a", encoding="utf-8")
    to_file.setFormatter(logging.Formatter(FILE_FORMAT))
    to_terminal = _Stderr()
    to_terminal.setFormatter(logging.Formatter(TERMINAL_FORMAT))
    if not verbose:
        to_terminal.addFilter(shown_on_terminal)
        for key, value in quiet_environment().items():
            os.environ.setdefault(key, value)
    _install([to_file, to_terminal])
    adopt_library_loggers()
    return log_path


def ray_init_options(log_path: str, verbose: bool) -> dict[str, Any]:
    """``ray.init(**ray_init_options(log_path, verbose))``: the run's workers set themselves up with
    ``setup_worker``; Ray's driver logger writes through the run's handlers (``configure_logging=False``)."""
    adopt_library_loggers()
    env_vars = {LOG_ENV: log_path, VERBOSE_ENV: "1" if verbose else "0"}
    if not verbose:
        env_vars.update({k: os.environ.get(k, v) for k, v in quiet_environment().items()})
    return {
        "log_to_driver": True,
        "configure_logging": False,
        "runtime_env": {"worker_process_setup_hook": "launch.console.setup_worker", "env_vars": env_vars},
    }


def setup_worker() -> None:
    """In a Ray worker: its output to the run log, the terminal's records to Ray's forwarded stderr."""
    log_path = os.environ.get(LOG_ENV)
    if not log_path:
        return
    verbose = os.environ.get(VERBOSE_ENV) == "1"
    forwarded: logging.Handler
    if verbose:
        forwarded = _Stderr()
    else:
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        sys.stdout.flush()
        sys.stderr.flush()
        terminal = os.fdopen(os.dup(2), "w", buffering=1, encoding="utf-8")  # Ray forwards this file
        log_fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(log_fd)
        forwarded = _ForwardedToRay(terminal)
        forwarded.addFilter(shown_on_terminal)
    forwarded.setFormatter(logging.Formatter(TERMINAL_FORMAT))
    to_file = logging.StreamHandler(sys.stderr)  # fd 2: the run log (verbose: Ray's forwarded stderr)
    to_file.setFormatter(logging.Formatter(FILE_FORMAT))
    _install([to_file, forwarded] if not verbose else [forwarded])
