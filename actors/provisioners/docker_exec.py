"""The Docker Engine API below the docker provisioner: one SDK client per engine, attached execs
(start, output demultiplexed by the SDK's ``docker.utils.socket``, exit code, kill through the
host pid). Shared by ``DockerProvisioner`` and its stdio bridge (``docker_attach.py``), which must
not import the rest.
"""

from __future__ import annotations

import functools
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psutil
from docker.utils.socket import consume_socket_output, demux_adaptor, frames_iter

from actors.errors import EnvError
from actors.provisioners.local import ENV_MARKER, TIMEOUT_RETURNCODE, kill_all
from specs.env import EnvInfo, ExecResult

logger = logging.getLogger(__name__)


@functools.cache
def engine_client(base_url: str | None) -> Any:
    """One SDK client per engine URL and process (the SDK's client is thread-safe)."""
    import docker

    try:
        return docker.DockerClient(base_url=base_url) if base_url else docker.from_env()
    except docker.errors.DockerException as e:
        raise EnvError(
            f"docker backend: no Docker API engine at {base_url or '$DOCKER_HOST/default socket'} "
            f"({short(e)}); start Docker, or Podman's service: "
            "`podman system service --time=0 unix:///run/mcprl/podman.sock` and "
            "DOCKER_HOST=unix:///run/mcprl/podman.sock"
        ) from e


def env_url(env: EnvInfo) -> str | None:
    url = env.data.get("docker_url")
    return url if isinstance(url, str) else None


def open_exec(
    env_id: str,
    url: str | None,
    container: str,
    argv: list[str],
    environ: dict[str, str],
    workdir: str,
    stdin: bool,
) -> tuple[str, socket.socket]:
    """Start ``argv`` in the container as an attached exec carrying the env marker; its id and socket."""
    api = engine_client(url).api
    created = api.exec_create(
        container,
        argv,
        stdin=stdin,
        stdout=True,
        stderr=True,
        environment=environ | {ENV_MARKER: env_id},
        workdir=workdir,
    )
    attached = api.exec_start(created["Id"], socket=True)
    raw = getattr(attached, "_sock", attached)  # the SDK wraps the socket in a SocketIO
    return created["Id"], raw


def exit_code(url: str | None, exec_id: str) -> int:
    """The exec's exit code, once the engine has recorded it (briefly after the stream ends)."""
    api = engine_client(url).api
    deadline = time.monotonic() + 5.0
    while True:
        inspected = api.exec_inspect(exec_id)
        if not inspected.get("Running") and inspected.get("ExitCode") is not None:
            return int(inspected["ExitCode"])
        if time.monotonic() > deadline:
            logger.warning("exec %s: the engine recorded no exit code within 5 s; reporting -1", exec_id[:12])
            return -1
        time.sleep(0.01)


def kill_exec(url: str | None, exec_id: str, env_id: str) -> bool:
    """SIGKILL an exec's process tree through its host pid, if that pid is on this host and
    carries the environment's marker (pids get reused); whether it did."""
    try:
        pid = int(engine_client(url).api.exec_inspect(exec_id).get("Pid") or 0)
        root = psutil.Process(pid) if pid > 0 else None
        if root is None or root.environ().get(ENV_MARKER) != env_id:
            return False
        victims = [root, *root.children(recursive=True)]
    except (psutil.Error, OSError, ValueError):
        return False
    except Exception as e:  # the engine: nothing more to do here than say so
        logger.warning("cannot inspect exec %s of env %s: %s", exec_id[:12], env_id, short(e))
        return False
    kill_all(victims)
    return True


def exec_blocking(env: EnvInfo, argv: list[str], *, stdin: bytes | None, timeout_s: float) -> ExecResult:
    """Run ``argv`` as an attached exec; its output demultiplexed by the SDK. At the deadline the
    exec is killed and its socket shut, which ends the read: the output so far and code 124."""
    url = env_url(env)
    exec_id, sock = open_exec(
        env.env_id, url, env.data["container"], argv, {}, env.workdir, stdin=stdin is not None
    )
    deadline = _Deadline(timeout_s, lambda: _expire(url, exec_id, env.env_id, argv[0], sock))
    try:
        if stdin is not None:
            threading.Thread(target=_feed, args=(sock, stdin), daemon=True).start()
        frames = (demux_adaptor(*frame) for frame in _until_shut(frames_iter(sock, tty=False), deadline))
        out, err = consume_socket_output(frames, demux=True)
    finally:
        passed = deadline.finish()
        sock.close()
    stdout, stderr = (out or b"").decode(errors="replace"), (err or b"").decode(errors="replace")
    if passed:
        note = f"[mcprl] killed {argv[0]!r} in env {env.env_id} after its {timeout_s:g}s deadline\n"
        return ExecResult(returncode=TIMEOUT_RETURNCODE, stdout=stdout, stderr=stderr + note)
    return ExecResult(returncode=exit_code(url, exec_id), stdout=stdout, stderr=stderr)


class _Deadline:
    """Calls ``expire`` once, in a timer thread, at ``timeout_s`` unless ``finish`` came first."""

    def __init__(self, timeout_s: float, expire: Callable[[], None]) -> None:
        self._expire, self._lock = expire, threading.Lock()
        self._finished = self.passed = False
        self._timer = threading.Timer(max(timeout_s, 0.0), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        with self._lock:
            if self._finished:
                return
            self.passed = True
        self._expire()

    def finish(self) -> bool:
        """Stop the timer (waiting for an expiry under way); whether the deadline passed."""
        with self._lock:
            self._finished = True
        self._timer.cancel()
        self._timer.join()
        return self.passed


def _expire(url: str | None, exec_id: str, env_id: str, program: str, sock: socket.socket) -> None:
    if not kill_exec(url, exec_id, env_id):
        logger.warning(
            "docker env %s: %r passed its deadline and could not be killed from this host; it "
            "lives until the environment's reset or destroy",
            env_id,
            program,
        )
    try:
        sock.shutdown(socket.SHUT_RDWR)  # the blocked read returns: end of stream
    except OSError:
        pass  # the stream had ended already


def _until_shut(frames: Iterator[tuple[Any, bytes]], deadline: _Deadline) -> Iterator[tuple[Any, bytes]]:
    """``frames``, ending quietly where the read failed because the deadline shut the socket."""
    try:
        yield from frames
    except OSError:
        if not deadline.passed:
            raise


def _feed(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)  # EOF on the command's stdin
    except OSError:
        pass  # the command exited without reading all of its input: its exit code tells


def short(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"
