"""The Docker Engine API below the docker provisioner: one SDK client per engine, attached execs
(start, read the multiplexed output, exit code, kill through the host pid). Shared by
``DockerProvisioner`` and its stdio bridge (``docker_attach.py``), which must not import the rest.
"""

from __future__ import annotations

import functools
import logging
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import psutil

from actors.errors import EnvError
from specs.env import EnvInfo, ExecResult
from actors.provisioners.local import ENV_MARKER, TIMEOUT_RETURNCODE, kill_all

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


def frames(sock: socket.socket) -> Iterator[tuple[int, bytes]]:
    """The exec's output as (stream, payload): 1 stdout, 2 stderr (the API's multiplexed format)."""
    buffered = sock.makefile("rb", buffering=0)
    while True:
        header = _read_exactly(buffered, 8)
        if header is None:
            return
        size = int.from_bytes(header[4:8], "big")
        payload = _read_exactly(buffered, size) if size else b""
        if payload is None:
            return
        yield header[0], payload


def _read_exactly(stream: Any, n: int) -> bytes | None:
    data = bytearray()
    while len(data) < n:
        chunk = stream.read(n - len(data))
        if not chunk:
            return None
        data.extend(chunk)
    return bytes(data)


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
    url, deadline = env_url(env), time.monotonic() + timeout_s
    exec_id, sock = open_exec(
        env.env_id, url, env.data["container"], argv, {}, env.workdir, stdin=stdin is not None
    )
    out = {1: bytearray(), 2: bytearray()}
    timed_out = threading.Event()
    try:
        if stdin is not None:
            threading.Thread(target=_feed, args=(sock, stdin), daemon=True).start()
        sock.settimeout(max(timeout_s, 0.001))
        try:
            for stream, payload in frames(sock):
                out.setdefault(stream, bytearray()).extend(payload)
                if time.monotonic() > deadline:
                    raise TimeoutError
                sock.settimeout(max(deadline - time.monotonic(), 0.001))
        except TimeoutError:
            timed_out.set()
    finally:
        if timed_out.is_set() and not kill_exec(url, exec_id, env.env_id):
            logger.warning(
                "docker env %s: %r passed its deadline and could not be killed from this host; it "
                "lives until the environment's reset or destroy",
                env.env_id,
                argv[0],
            )
        sock.close()
    stdout, stderr = out[1].decode(errors="replace"), out[2].decode(errors="replace")
    if timed_out.is_set():
        note = f"[mcprl] killed {argv[0]!r} in env {env.env_id} after its {timeout_s:g}s deadline\n"
        return ExecResult(returncode=TIMEOUT_RETURNCODE, stdout=stdout, stderr=stderr + note)
    return ExecResult(returncode=exit_code(url, exec_id), stdout=stdout, stderr=stderr)


def _feed(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)  # EOF on the command's stdin
    except OSError:
        pass  # the command exited without reading all of its input: its exit code tells


def short(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"
