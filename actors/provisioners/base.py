"""The provisioner seam: the only place a runtime (subprocess, sandbox, container) appears.

A provisioner creates isolated environments, resets them for reuse, checks their health, destroys
them, and lists the ones a run owns (for the reaper). It also knows how to start a process inside
an environment: ``exec`` for hooks and evaluators, ``stdio_launch`` for MCP servers that the gateway
reaches over stdio. ``EnvInfo`` is plain data, so any process (pool, gateway, evaluator) can act
on an environment through ``make_provisioner(info.backend)``.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal, Protocol, runtime_checkable

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


@runtime_checkable
class Provisioner(Protocol):
    """A runtime backend for environments. All methods are async and safe to call concurrently."""

    name: str

    async def create(self, config: EnvConfig, run_id: str) -> EnvInfo: ...

    async def reset(self, env: EnvInfo) -> None:
        """Return the environment to its created state: no file, process or state left."""

    async def health_check(self, env: EnvInfo) -> bool: ...

    async def destroy(self, env: EnvInfo) -> None:
        """Remove the environment and everything it started; idempotent."""

    async def list_owned(self, run_id: str | None = None) -> list[EnvInfo]:
        """Environments this backend created (for ``run_id``, or every run when ``None``)."""

    async def exec(
        self, env: EnvInfo, argv: list[str], *, stdin: bytes | None = None, timeout_s: float = 60.0
    ) -> ExecResult:
        """Run a command inside the environment, in its working directory."""

    def stdio_launch(self, env: EnvInfo, server: ServerLaunch) -> ServerLaunch:
        """The command line that runs ``server`` inside ``env`` with stdio crossing the boundary."""

    def spec(self) -> dict[str, Any]:
        """Constructor arguments (plain JSON) that rebuild this provisioner in another process:
        ``make_provisioner(self.name, **self.spec())``."""


class EnvHandle:
    """What ``prepare`` / ``cleanup`` hooks and evaluators get: one way to touch any backend."""

    def __init__(self, info: EnvInfo, provisioner: Provisioner) -> None:
        self.info = info
        self._provisioner = provisioner

    @property
    def workdir(self) -> str:
        return self.info.workdir

    async def run(
        self, argv: list[str], *, stdin: bytes | None = None, timeout_s: float = 60.0
    ) -> ExecResult:
        return await self._provisioner.exec(self.info, argv, stdin=stdin, timeout_s=timeout_s)

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


def make_provisioner(backend: str, **options: Any) -> Provisioner:
    """The provisioner for a backend name (``local``, ``bwrap``, ``docker``); ``options`` are its
    constructor's keyword arguments (defaults when omitted)."""
    if backend == "local":
        from actors.provisioners.local import LocalProvisioner

        return LocalProvisioner(**options)
    if backend == "bwrap":
        from actors.provisioners.bwrap import BwrapProvisioner

        return BwrapProvisioner(**options)
    if backend == "docker":
        from actors.provisioners.docker import DockerProvisioner

        return DockerProvisioner(**options)
    raise ValueError(f"unknown provisioner backend {backend!r}; expected one of: local, bwrap, docker")
