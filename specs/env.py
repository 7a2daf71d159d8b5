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

PORT_PLACEHOLDER = "{{PORT}}"
HOST_PLACEHOLDER = "{{HOST}}"
"""Left in a listener's (``sse``, ``streamable_http``) command and URL by the registry: filled per
environment with the address it listens on (command) and the address it is reached at (URL)."""


class ListenAddress(msgspec.Struct, frozen=True, kw_only=True):
    """Where a listener of one environment listens (``bind``, ``port``, as its process sees them)
    and where the gateway reaches it (``reach``, ``port``)."""

    bind: str
    port: int
    reach: str


class ServerLaunch(msgspec.Struct, frozen=True, kw_only=True):
    """How to reach one MCP server: a command run over stdio inside the environment (``stdio``); a
    command that listens in the environment (``listens``), for streamable HTTP (``http``) or SSE
    (``sse``, MCP-Universe's legacy entry); or the URL of a running streamable-HTTP server (``http``
    with no command)."""

    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: dict[str, str] = msgspec.field(default_factory=dict)
    """Extra environment variables; may hold secrets filled from templates: never log them."""
    cwd: str | None = None
    transport: Literal["stdio", "sse", "http"] = "stdio"
    url: str | None = None
    """``http``: the server's endpoint; a listener: where it is reached once started (with
    ``{{HOST}}`` / ``{{PORT}}`` until the provisioner fills them)."""
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    """HTTP headers for ``url`` (tokens filled from templates)."""
    secrets: tuple[str, ...] = ()
    """Every value filled from a ``{{VAR}}`` template into ``env``, ``headers`` or the URL: the
    gateway redacts them from observations and logs (command-line values are public anyway)."""
    keep_alive: bool = False
    """A ``stdio`` server that holds no per-episode state: a reused environment keeps its process
    and MCP session across episodes (the reset spares it and whatever it started; the destroy
    ends it), instead of starting it again for each episode. The registry's ``keep_alive``."""

    @property
    def listens(self) -> bool:
        """A command that serves HTTP (``http``) or SSE (``sse``) inside the environment, started
        per environment on an address the provisioner picks (``Provisioner.listen_address``)."""
        return self.transport != "stdio" and bool(self.command)

    def listening_at(self, address: ListenAddress) -> ServerLaunch:
        """This listener with its ``{{HOST}}`` / ``{{PORT}}`` filled: ``bind`` in its arguments,
        ``reach`` in its URL."""

        def fill(text: str, host: str) -> str:
            return text.replace(HOST_PLACEHOLDER, host).replace(PORT_PLACEHOLDER, str(address.port))

        return msgspec.structs.replace(
            self,
            args=tuple(fill(a, address.bind) for a in self.args),
            url=fill(self.url, address.reach) if self.url else self.url,
        )

    def __repr__(self) -> str:  # keep secrets out of logs and tracebacks
        where = (
            f"url={self.url!r}"
            if self.transport == "http" and not self.command
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

    def for_backend(self, backend: str) -> EnvConfig:
        """This config as ``backend`` runs it: only docker builds the task's image; elsewhere its
        prepare hooks lay the environment out alone (``specs/domains/swe``)."""
        if backend == "docker" or (self.dockerfile_path is None and not self.build_args):
            return self
        return msgspec.structs.replace(self, dockerfile_path=None, build_args={})

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
