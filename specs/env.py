"""Environments as plain data, and the handle that domain hooks and evaluators touch them through.

These types cross every layer: the server registry (``specs.servers``) builds ``ServerLaunch``es,
the pool and the provisioner backends (``actors/provisioners/``) create ``EnvInfo``s from
``EnvConfig``s, and a domain's ``prepare`` / ``cleanup`` / ``evaluator`` functions act on an
environment through ``EnvHandle`` only, so they run unchanged on every backend. Nothing here
imports a runtime: the backend behind a handle is anything with an ``exec`` (``Runner``).
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal, Protocol

import msgspec


class ServerLaunch(msgspec.Struct, frozen=True, kw_only=True):
    """How to reach one MCP server: a command run over stdio inside the environment (``stdio``), a
    command that listens for SSE on a port (``sse``, MCP-Universe's legacy entry) or the URL of a
    running streamable-HTTP server (``http``)."""

    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: dict[str, str] = msgspec.field(default_factory=dict)
    """Extra environment variables; may hold secrets filled from templates: never log them."""
    cwd: str | None = None
    transport: Literal["stdio", "sse", "http"] = "stdio"
    url: str | None = None
    """``http``: the server's endpoint; ``sse``: where the started command listens."""
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    """HTTP headers for ``url`` (tokens filled from templates)."""
    secrets: tuple[str, ...] = ()
    """Every value filled from a ``{{VAR}}`` template into ``env``, ``headers`` or the URL: the
    gateway redacts them from observations and logs (command-line values are public anyway)."""
    keep_alive: bool = False
    """A ``stdio`` server that holds no per-episode state: a reused environment keeps its process
    and MCP session across episodes (the reset spares it and whatever it started; the destroy
    ends it), instead of starting it again for each episode. The registry's ``keep_alive``."""

    def __repr__(self) -> str:  # keep secrets out of logs and tracebacks
        where = (
            f"url={self.url!r}"
            if self.transport == "http"
            else f"command={self.command!r}, args={self.args!r}"
        )
        return f"ServerLaunch(name={self.name!r}, transport={self.transport!r}, {where}, env=<{len(self.env)} vars>)"


class EnvConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Everything that decides whether two tasks can share (a reset of) one environment."""

    servers: tuple[ServerLaunch, ...] = ()
    image: str | None = None
    dockerfile_path: str | None = None
    build_args: dict[str, str] = msgspec.field(default_factory=dict)
    memory_mb: int | None = None
    cpus: float | None = None
    pids: int | None = None
    network: bool = False

    def key(self) -> str:
        """Compatibility key: environments with equal keys are interchangeable after a reset."""
        blob = msgspec.json.encode(self, order="deterministic")
        return hashlib.sha256(blob).hexdigest()[:16]


class EnvInfo(msgspec.Struct, frozen=True, kw_only=True):
    """A live environment, as plain data any process can use."""

    env_id: str
    run_id: str
    backend: str
    key: str
    workdir: str
    """Writable working directory of the environment, as its processes see it (local and bwrap: the
    same path on the host; docker: a path inside the container)."""
    created_at: float
    data: dict[str, Any] = msgspec.field(default_factory=dict)
    """Backend-specific handle data (container id, sandbox pid, ...)."""


class ExecResult(msgspec.Struct, frozen=True, kw_only=True):
    returncode: int
    stdout: str
    stderr: str


class Runner(Protocol):
    """What an ``EnvHandle`` needs of a backend: run a command inside an environment."""

    async def exec(
        self, env: EnvInfo, argv: list[str], *, stdin: bytes | None = None, timeout_s: float = 60.0
    ) -> ExecResult: ...


class EnvHandle:
    """What ``prepare`` / ``cleanup`` hooks and evaluators get: one way to touch any backend."""

    def __init__(self, info: EnvInfo, runner: Runner) -> None:
        self.info = info
        self._runner = runner

    @property
    def workdir(self) -> str:
        return self.info.workdir

    async def run(
        self, argv: list[str], *, stdin: bytes | None = None, timeout_s: float = 60.0
    ) -> ExecResult:
        return await self._runner.exec(self.info, argv, stdin=stdin, timeout_s=timeout_s)

    async def write_file(self, path: str, data: str | bytes) -> None:
        payload = data.encode() if isinstance(data, str) else data
        result = await self.run(
            ["sh", "-c", 'mkdir -p "$(dirname "$1")" && cat > "$1"', "sh", path], stdin=payload
        )
        if result.returncode != 0:
            raise OSError(f"write_file({path!r}) in env {self.info.env_id} failed: {result.stderr.strip()}")

    async def read_file(self, path: str) -> str:
        result = await self.run(["cat", path])
        if result.returncode != 0:
            raise FileNotFoundError(
                f"read_file({path!r}) in env {self.info.env_id} failed: {result.stderr.strip()}"
            )
        return result.stdout
