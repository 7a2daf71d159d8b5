"""The provisioner seam: the only place a runtime (subprocess, sandbox, container) appears.

A provisioner creates isolated environments, resets them for reuse, checks their health, destroys
them, and lists the ones a run owns (for the reaper). It also knows how to start a process inside
an environment: ``exec`` for hooks and evaluators, ``stdio_launch`` for MCP servers that the gateway
reaches over stdio. ``EnvInfo`` is plain data, so any process (pool, gateway, evaluator) can act
on an environment through ``make_provisioner(info.backend)``. A server that listens (streamable
HTTP or SSE, ``ServerLaunch.listens``) is started like a stdio one, on the address
``listen_address`` gives, and reached over the network at that address.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from specs.env import EnvConfig, EnvInfo, ExecResult, ListenAddress, ServerLaunch


@runtime_checkable
class Provisioner(Protocol):
    """A runtime backend for environments. All methods are async and safe to call concurrently."""

    name: str
    keeps_servers: bool
    """Whether ``reset`` spares the processes of ``keep_alive`` servers (so the gateway parks their
    sessions for the environment's next episode)."""

    async def create(self, config: EnvConfig, run_id: str) -> EnvInfo: ...

    async def reset(self, env: EnvInfo) -> None:
        """Return the environment to its created state: no file, process or state left, but the
        processes of ``keep_alive`` servers (``ServerLaunch.keep_alive``) where the backend spares
        them (``keeps_servers``: local, bwrap; docker restarts its container)."""

    async def health_check(self, env: EnvInfo) -> bool: ...

    async def destroy(self, env: EnvInfo) -> None:
        """Remove the environment and everything it started; idempotent."""

    async def list_owned(self, run_id: str | None = None) -> list[EnvInfo]:
        """Environments this backend created (for ``run_id``, or every run when ``None``)."""

    async def exec(
        self, env: EnvInfo, argv: list[str], *, stdin: bytes | None = None, timeout_s: float = 60.0
    ) -> ExecResult:
        """Run a command inside the environment, in its working directory."""

    async def limits_hit(self, env: EnvInfo) -> dict[str, int]:
        """How often the environment hit a resource limit since its last reset, by limit (``memory``:
        processes killed for it; ``pids``: process starts refused); empty where the backend does
        not count them."""

    def stdio_launch(self, env: EnvInfo, server: ServerLaunch) -> ServerLaunch:
        """The command line that runs ``server`` inside ``env`` with stdio crossing the boundary."""

    async def listen_address(self, env: EnvInfo, server: ServerLaunch) -> ListenAddress:
        """Where the listener ``server`` (``server.listens``) of ``env`` listens, and where this
        host reaches it; ``EnvError`` saying why where the backend cannot reach one (bwrap)."""

    def spec(self) -> dict[str, Any]:
        """Constructor arguments (plain JSON) that rebuild this provisioner in another process:
        ``make_provisioner(self.name, **self.spec())``."""


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
