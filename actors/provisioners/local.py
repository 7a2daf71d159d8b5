"""Local provisioner: an environment is a temp directory on the host. NOT ISOLATED: development only.

Layout of one environment (``root`` defaults to ``$TMPDIR/mcprl-envs``)::

    <root>/<run_id>/<env_id>/label.json   EnvInfo as JSON, with the owner's pid: found by list_owned
    <root>/<run_id>/<env_id>/work/        the working directory (EnvInfo.workdir)
    <root>/<run_id>/<env_id>/home/        HOME of every process started in the environment
    <root>/<run_id>/<env_id>/tmp/         TMPDIR of every process started in the environment

Commands and MCP servers run as plain host processes with the host's user, file system and
network; only ``cwd``, ``HOME`` and ``TMPDIR`` point into the environment. Nothing stops a process
from reading or writing elsewhere. Use ``bwrap`` or ``docker`` for anything but development.

Every process started here carries ``MCPRL_ENV_ID=<env_id>`` in its environment (children inherit
it); ``reset`` and ``destroy`` kill every process that carries the marker, which also catches
background processes a hook left behind and server processes the gateway did not close. A marker
rather than recorded pids: pids get reused, an environment variable does not migrate. A server
declared ``keep_alive`` also carries ``MCPRL_KEEP_ALIVE=1``: ``reset`` spares it and its
descendants (the gateway keeps its session for the next episode), ``destroy`` kills it too. The
reset empties ``work``/``home``/``tmp`` in place, so a kept server's working directory stays valid.

All paths are derived from the ``EnvInfo`` itself, so a default ``LocalProvisioner()`` (as
``make_provisioner("local")`` builds in another process) can act on an environment created under
any root.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import msgspec
import psutil

from actors.env_watchdog import start_marker
from actors.errors import EnvError
from specs.env import EnvConfig, EnvInfo, ExecResult, ListenAddress, ServerLaunch

logger = logging.getLogger(__name__)

ENV_MARKER = "MCPRL_ENV_ID"
"""Environment variable that tags every process started inside an environment."""
KEEP_MARKER = "MCPRL_KEEP_ALIVE"
"""Tags a ``keep_alive`` server's process: a reset spares it (and its descendants)."""
_SUBDIRS = ("work", "home", "tmp")
TIMEOUT_RETURNCODE = 124  # what coreutils' timeout(1) returns, so callers can tell a deadline
KILL_REAP_S = 5.0  # after SIGKILL the kernel needs only a moment; bound it anyway


def default_root() -> Path:
    return Path(tempfile.gettempdir()) / "mcprl-envs"


class LocalProvisioner:
    """Environments as host temp dirs; subprocesses with no isolation (development only)."""

    name = "local"
    keeps_servers = True

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root) if root is not None else default_root()

    async def create(self, config: EnvConfig, run_id: str) -> EnvInfo:
        env_id = uuid.uuid4().hex[:12]
        env_dir = self.root / run_id / env_id
        info = EnvInfo(
            env_id=env_id,
            run_id=run_id,
            backend=self.name,
            key=config.key(),
            workdir=str(env_dir / "work"),
            created_at=time.time(),
            data={"env_dir": str(env_dir), **owner(), **self._env_data()},
        )
        try:
            await anyio.to_thread.run_sync(make_env_dir, env_dir, msgspec.json.encode(info))
        except OSError as e:
            await anyio.to_thread.run_sync(lambda: shutil.rmtree(env_dir, ignore_errors=True))
            raise EnvError(f"{self.name} env {env_id}: cannot create {env_dir}: {e}") from e
        return info

    def spec(self) -> dict[str, Any]:
        return {"root": str(self.root)}

    def _env_data(self) -> dict[str, Any]:
        """Backend settings recorded in ``EnvInfo.data``, so any process acts on the env alike."""
        return {}

    async def reset(self, env: EnvInfo) -> None:
        """Kill the environment's processes but its ``keep_alive`` servers; empty its directories."""
        env_dir = await anyio.to_thread.run_sync(checked_dir, env)
        await anyio.to_thread.run_sync(kill_marked_processes, env.env_id, True)
        try:
            await anyio.to_thread.run_sync(empty_dirs, env_dir)
        except OSError as e:
            raise EnvError(f"local env {env.env_id}: reset of {env_dir} failed: {e}") from e

    async def health_check(self, env: EnvInfo) -> bool:
        return await anyio.to_thread.run_sync(dir_healthy, env)

    async def limits_hit(self, env: EnvInfo) -> dict[str, int]:
        return {}  # no limits here (bwrap overrides this)

    async def destroy(self, env: EnvInfo) -> None:
        await anyio.to_thread.run_sync(kill_marked_processes, env.env_id)
        await anyio.to_thread.run_sync(_remove_env_dir, env)

    async def list_owned(self, run_id: str | None = None) -> list[EnvInfo]:
        return await anyio.to_thread.run_sync(_read_labels, self.root, run_id)

    async def exec(
        self, env: EnvInfo, argv: list[str], *, stdin: bytes | None = None, timeout_s: float = 60.0
    ) -> ExecResult:
        """Run ``argv`` in the workdir in its own process group; on timeout kill the whole group and
        return code 124 (as ``timeout(1)`` does) with a note on stderr."""
        await anyio.to_thread.run_sync(checked_dir, env)
        return await run_with_deadline(
            argv,
            env=env,
            environ=_process_environ(env, dict(os.environ)),
            stdin=stdin,
            timeout_s=timeout_s,
            kill=kill_group,
        )

    def stdio_launch(self, env: EnvInfo, server: ServerLaunch) -> ServerLaunch:
        """The server's own command, run on the host with cwd in the workdir (NO isolation)."""
        cwd = Path(env.workdir) / server.cwd if server.cwd else Path(env.workdir)
        return ServerLaunch(
            name=server.name,
            command=server.command,
            args=server.args,
            env=_process_environ(env, dict(server.env) | keep_marker(server)),
            cwd=str(cwd),
        )

    async def listen_address(self, env: EnvInfo, server: ServerLaunch) -> ListenAddress:
        """A port of this host's loopback that was free a moment ago."""
        return ListenAddress(bind=LOOPBACK, port=free_port(), reach=LOOPBACK)


LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A TCP port on the loopback that was free a moment ago."""
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def keep_marker(server: ServerLaunch) -> dict[str, str]:
    """The variable that makes a reset spare a ``keep_alive`` server (none for other servers)."""
    return {KEEP_MARKER: "1"} if server.keep_alive else {}


def empty_dirs(env_dir: Path) -> None:
    """Empty ``work``, ``home`` and ``tmp`` in place (the directories themselves stay: a kept
    server's working directory, or a sandbox's bind mount of it, must stay the same one)."""
    for sub in _SUBDIRS:
        path = env_dir / sub
        path.mkdir(exist_ok=True)
        for child in path.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()


def _process_environ(env: EnvInfo, base: dict[str, str]) -> dict[str, str]:
    env_dir = Path(env.data["env_dir"])
    return base | {"HOME": str(env_dir / "home"), "TMPDIR": str(env_dir / "tmp"), ENV_MARKER: env.env_id}


def checked_dir(env: EnvInfo) -> Path:
    """The environment's directory, after checking that it really is this environment."""
    env_dir = Path(env.data.get("env_dir", ""))
    try:
        label = msgspec.json.decode((env_dir / "label.json").read_bytes(), type=EnvInfo)
    except (OSError, msgspec.DecodeError) as e:
        raise EnvError(f"{env.backend} env {env.env_id}: no readable label in {env_dir!s}: {e}") from e
    if label.env_id != env.env_id:
        raise EnvError(
            f"{env.backend} env {env.env_id}: {env_dir} is labelled {label.env_id!r}, expected {env.env_id!r}"
        )
    return env_dir


def make_env_dir(env_dir: Path, label: bytes) -> None:
    for sub in _SUBDIRS:
        (env_dir / sub).mkdir(parents=True)
    write_label(env_dir, label)  # last: a label on disk means a complete environment


def write_label(env_dir: Path, label: bytes) -> None:
    """(Re)write the environment's label atomically."""
    tmp = env_dir / "label.json.tmp"
    tmp.write_bytes(label)
    tmp.rename(env_dir / "label.json")


def dir_healthy(env: EnvInfo) -> bool:
    env_dir, work = Path(env.data.get("env_dir", "")), Path(env.workdir)
    return (env_dir / "label.json").is_file() and work.is_dir() and os.access(work, os.W_OK | os.X_OK)


def _remove_env_dir(env: EnvInfo) -> None:
    env_dir = Path(env.data.get("env_dir", ""))
    if not (env_dir / "label.json").is_file():
        return  # already gone (idempotent), or not an environment: never rm -rf a stranger's dir
    checked_dir(env)
    shutil.rmtree(env_dir)
    try:
        env_dir.parent.rmdir()  # the run dir, once its last environment is gone
    except OSError:
        pass


def _read_labels(root: Path, run_id: str | None) -> list[EnvInfo]:
    pattern = f"{run_id}/*/label.json" if run_id is not None else "*/*/label.json"
    found: list[EnvInfo] = []
    for label in sorted(root.glob(pattern)):
        try:
            found.append(msgspec.json.decode(label.read_bytes(), type=EnvInfo))
        except (OSError, msgspec.DecodeError) as e:
            logger.warning("skipping unreadable environment label %s: %s", label, e)
    return found


async def communicate(
    process: anyio.abc.Process, stdin: bytes | None, out: bytearray, err: bytearray
) -> None:
    async def drain(stream: anyio.abc.ByteReceiveStream | None, buf: bytearray) -> None:
        if stream is not None:
            async for chunk in stream:
                buf.extend(chunk)

    async with anyio.create_task_group() as tg:
        tg.start_soon(drain, process.stdout, out)
        tg.start_soon(drain, process.stderr, err)
        if stdin is not None and process.stdin is not None:
            try:
                await process.stdin.send(stdin)
            except (anyio.BrokenResourceError, OSError):
                pass  # the command exited without reading all of its input: its exit code tells
            await process.stdin.aclose()
        await process.wait()


def killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_marked_processes(env_id: str, spare_kept: bool = False) -> int:
    """SIGKILL every process whose environment carries ``MCPRL_ENV_ID=env_id``; returns how many.
    ``spare_kept``: not the ``keep_alive`` servers (``MCPRL_KEEP_ALIVE``) and their descendants."""
    marked = marked_processes(env_id, spare_kept)
    kill_all(marked)
    return len(marked)


def marked_processes(
    env_id: str, spare_kept: bool = False, descendants: bool = False
) -> list[psutil.Process]:
    """The processes that carry ``MCPRL_ENV_ID=env_id`` (``descendants``: and every descendant of
    one, marked or not); ``spare_kept``: less the ``keep_alive`` servers and their descendants."""
    me = os.getpid()
    found: dict[int, psutil.Process] = {}
    kept: set[int] = set()
    for proc in psutil.process_iter():
        if proc.pid == me:
            continue
        try:
            environ = proc.environ()
            if environ.get(ENV_MARKER) != env_id:
                continue
            tree = [proc, *proc.children(recursive=True)] if descendants or spare_kept else [proc]
            found.update({p.pid: p for p in (tree if descendants else [proc])})
            if spare_kept and environ.get(KEEP_MARKER):
                kept.update(p.pid for p in tree)
        except (psutil.Error, OSError):
            continue  # gone, a zombie, or not ours to read
    return [p for pid, p in found.items() if pid not in kept]


async def run_with_deadline(
    command: list[str],
    *,
    env: EnvInfo,
    environ: dict[str, str],
    stdin: bytes | None,
    timeout_s: float,
    kill: Callable[[int], None],
    name: str | None = None,
) -> ExecResult:
    """Run ``command`` in the env's workdir as the leader of a new process group. On the deadline
    (or if the caller is cancelled) ``kill(pid)`` takes down everything it started and returns once
    it is gone; the result is then code 124 (as ``timeout(1)``) with a note on stderr."""
    process = await anyio.open_process(
        command,
        cwd=env.workdir,
        env=environ,
        start_new_session=True,  # its own group, so a deadline kills its children too
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
    )
    out, err = bytearray(), bytearray()
    timed_out = True
    async with process:  # closes the pipes and the transport however we leave
        try:
            with anyio.move_on_after(timeout_s):
                await communicate(process, stdin, out, err)
                timed_out = False
        finally:
            if timed_out:
                with anyio.CancelScope(shield=True), anyio.move_on_after(KILL_REAP_S):
                    await anyio.to_thread.run_sync(kill, process.pid)
                    await process.wait()
    stdout, stderr = out.decode(errors="replace"), err.decode(errors="replace")
    if timed_out:
        note = (
            f"[mcprl] killed {name or command[0]!r} in env {env.env_id} after its {timeout_s:g}s deadline\n"
        )
        return ExecResult(returncode=TIMEOUT_RETURNCODE, stdout=stdout, stderr=stderr + note)
    code = process.returncode if process.returncode is not None else -signal.SIGKILL
    return ExecResult(returncode=code, stdout=stdout, stderr=stderr)


def kill_group(pgid: int) -> None:
    """SIGKILL a process group and wait until its members are gone (SIGKILL lands asynchronously)."""
    killpg(pgid)
    _wait_group_gone(pgid)


def _wait_group_gone(pgid: int) -> None:
    members: list[psutil.Process] = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid:
                members.append(proc)
        except OSError:
            continue
    wait_until_gone(members)


def kill_all(victims: list[psutil.Process]) -> None:
    """SIGKILL every process of the list and wait (bounded) until they are gone."""
    for proc in victims:
        try:
            proc.kill()
        except psutil.Error:
            pass
    wait_until_gone(victims)


def owner() -> dict[str, Any]:
    """Who creates an environment (recorded in ``EnvInfo.data``): this process's pid and start
    time (pids get reused) and host, so a reaper can tell a dead owner from a live one."""
    pid = os.getpid()
    return {"owner_pid": pid, "owner_started": start_marker(pid), "owner_host": socket.gethostname()}


def wait_until_gone(procs: list[psutil.Process], within_s: float | None = None) -> None:
    """Bounded wait (``within_s``, default ``KILL_REAP_S``) until every process is dead. Polls instead of psutil.wait_procs: waitpid on our
    own children would steal the exit status from the event loop's child watcher. A zombie is dead
    enough: it holds no files and runs no code."""
    deadline = time.monotonic() + (KILL_REAP_S if within_s is None else within_s)
    while any(_running(p) for p in procs) and time.monotonic() < deadline:
        time.sleep(0.01)


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
