"""Crash cleanup: a detached process that destroys a run's environments once their owner is dead.

``EnvPool(watchdog=True)`` starts one at its first create::

    python -m actors.env_watchdog --backend docker --spec '{...}' --run-id R --owner-pid P --owner-started T

It detaches from the owner: it forks, its first process exits, and the second goes on in a session
of its own, a child of init (or of the nearest subreaper) rather than of the owner. So neither a
Ctrl-C nor a SIGKILL of the owner's process group reaches it, nor Ray, which kills an actor
worker's direct child processes when the worker exits (``RAY_kill_child_processes_on_worker_exit``,
on by default): the very moment a watchdog is for. (With Ray's raylet subreaper on,
``RAY_kill_child_processes_on_worker_exit_with_raylet_subreaper=1``, off by default, the raylet
adopts and kills it too: then only the next run's reaper cleans up.) It polls the owner (pid *and* start time: pids get
reused) and, once the owner is gone, destroys every environment of the run whose owner is dead
(containers, sandboxes, their processes and directories), then exits. A pool that shuts down cleanly stops its watchdog. What a watchdog could
not destroy (it was killed too, the machine rebooted) the next run's reaper finds by its labels.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import anyio
import psutil

POLL_S = 0.5
logger = logging.getLogger(__name__)


def start_marker(pid: int) -> str:
    """When process ``pid`` started, in a form no clock change moves: on Linux its start in clock
    ticks since boot (``/proc/<pid>/stat`` field 22), elsewhere its create time to the second.

    ``psutil``'s ``create_time`` is boot time (wall clock minus uptime) plus that start, so it moves
    whenever the wall clock is stepped or slewed: seen here drifting 16 s within one minute on a
    VM, which made a watchdog take a live owner for dead and destroy its environments."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return f"ticks:{stat.rsplit(')', 1)[1].split()[19]}"
    except (OSError, IndexError):
        return f"wall:{psutil.Process(pid).create_time():.0f}"


def process_alive(pid: object, started: object) -> bool:
    """Whether ``pid`` runs and is the process that started at ``started`` (a ``start_marker``;
    ``None``: any; a bare number: a create time, from labels written before markers)."""
    if not isinstance(pid, int):
        return False
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        if started is None:
            return True
        if isinstance(started, str) and started.startswith("ticks:"):
            return start_marker(pid) == started
        if isinstance(started, str) and started.startswith("wall:"):
            started = started[len("wall:") :]
        return abs(proc.create_time() - float(started)) < 1.0  # type: ignore[arg-type]
    except (psutil.Error, ValueError):
        return False


def owner_alive(data: dict[str, object]) -> bool:
    """Whether the process that created an environment (``EnvInfo.data``) still runs. An owner on
    another host (a shared remote engine) is taken to be alive: only its own host can tell."""
    host = data.get("owner_host")
    if host is not None and host != socket.gethostname():
        return True
    return process_alive(data.get("owner_pid"), data.get("owner_started"))


@dataclass(frozen=True)
class Watchdog:
    """A running watchdog. Not a child of the process that spawned it, so known by pid and start."""

    pid: int
    started: str  # its start_marker
    log: Path

    def running(self) -> bool:
        return process_alive(self.pid, self.started)

    def stop(self, timeout_s: float = 10.0) -> None:
        """End it (SIGTERM, SIGKILL after ``timeout_s``) and wait until it is gone. Blocks."""
        for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
            if not self.running():
                return
            with contextlib.suppress(ProcessLookupError):  # it ended just now
                os.kill(self.pid, sig)
            deadline = time.monotonic() + wait_s
            while self.running() and time.monotonic() < deadline:
                time.sleep(0.05)
        if self.running():
            raise RuntimeError(f"watchdog {self.pid} outlived SIGKILL (log: {self.log})")


def spawn(backend: str, spec: dict[str, object], run_id: str) -> Watchdog:
    """Start a watchdog for this process's environments of ``run_id``; returns once it runs."""
    me = psutil.Process()
    log = Path(tempfile.gettempdir()) / f"mcprl-watchdog-{run_id}-{me.pid}.log"
    command = [
        sys.executable,
        "-m",
        "actors.env_watchdog",
        *("--backend", backend, "--spec", json.dumps(spec), "--run-id", run_id),
        *("--owner-pid", str(me.pid), "--owner-started", start_marker(me.pid)),
        "--detach",
    ]
    root = str(Path(__file__).resolve().parents[1])
    environ = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    # O_NOFOLLOW: a predictable name in a shared /tmp must not be a planted symlink.
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "ab") as out:
        # Returns when the pipe closes: the first process has exited, the detached one has written
        # who it is and moved its stdout to the log.
        first = subprocess.run(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=out, env=environ, timeout=60
        )
    try:
        pid, started = first.stdout.decode().split()
        return Watchdog(int(pid), started, log)
    except ValueError:
        raise RuntimeError(
            f"the env watchdog of run {run_id} did not start (exit {first.returncode}; log: {log})"
        ) from None


def detach() -> None:
    """Leave the spawner (see the module's doc): fork; the parent exits, the child starts a session,
    writes ``<pid> <start_marker>`` to stdout for ``spawn`` and points stdout at stderr, the log."""
    if os.fork():
        os._exit(0)
    os.setsid()
    print(os.getpid(), start_marker(os.getpid()), flush=True)
    os.dup2(2, 1)


async def reap_run(backend: str, spec: dict[str, object], run_id: str) -> int:
    """Destroy the run's environments whose owner is dead; how many."""
    from actors.provisioners.base import make_provisioner

    provisioner = make_provisioner(backend, **spec)
    destroyed = 0
    for env in await provisioner.list_owned(run_id):
        if owner_alive(env.data):
            continue
        try:
            await provisioner.destroy(env)
            destroyed += 1
        except Exception:
            logger.exception("watchdog could not destroy env %s of run %s", env.env_id, run_id)
    return destroyed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="env_watchdog", description=__doc__.splitlines()[0])
    parser.add_argument("--backend", required=True)
    parser.add_argument("--spec", required=True, help="the provisioner's spec() as JSON")
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--owner-pid", type=int, required=True)
    parser.add_argument("--owner-started", required=True, help="the owner's start_marker")
    parser.add_argument("--detach", action="store_true", help="leave the caller first (what spawn does)")
    args = parser.parse_args(argv)
    if args.detach:
        detach()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s watchdog %(levelname)s %(message)s")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is for the owner, not for us
    while process_alive(args.owner_pid, args.owner_started):
        time.sleep(POLL_S)
    destroyed = anyio.run(reap_run, args.backend, json.loads(args.spec), args.run_id)
    logger.info(
        "owner %d of run %s is gone: destroyed %d environment(s)", args.owner_pid, args.run_id, destroyed
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
