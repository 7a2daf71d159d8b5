"""Docker provisioner: one container per environment, through the Docker Engine API.

Works with Docker, or with Podman's Docker-compatible service (``podman system service``): the
engine is reached with the ``docker`` SDK at ``base_url`` (else ``$DOCKER_HOST``, else the default
socket), and nothing here needs the ``docker`` command line.

An environment is a container that idles (``sleep infinity``) while the work happens in execs:

- **image**: ``EnvConfig.image`` as given (pulled once if the engine lacks it); or built from ``EnvConfig.dockerfile_path`` with ``build_args``, tagged
  ``mcprl/task:<hash of the build context, Dockerfile and build args>``, so it is built once per
  content (not per trajectory; a second create finds the tag); or, when the config names neither,
  the *host-root* image ``mcprl/hostroot``: a rootfs of a few symlinks and empty mount points that
  runs the host's programs, with ``/usr``, a few ``/etc`` files and the installation of each
  server (found as the bwrap backend finds it) bound read-only. An image built ``FROM
  mcprl/hostroot`` inherits its label and gets the same binds, so a domain can add files on top.
- **confinement**: read-only root; ``/workspace`` (the working directory, ``EnvInfo.workdir``) and
  ``/tmp`` are size-capped tmpfs; memory (no swap), CPU and pid limits; every capability dropped;
  ``no-new-privileges``; network ``none`` unless ``EnvConfig.network``, or, when a server listens
  (streamable HTTP or SSE), an internal network of the container's own, reachable from this host,
  with no route out (``actors/provisioners/docker_network.py``).
- **reset** restarts the container: every process dies and both tmpfs come back empty, whatever
  the image contains (no ``rm`` or ``kill`` needed inside).
- **labels**: ``io.mcprl.backend``, ``io.mcprl.run``, ``io.mcprl.env`` and the whole ``EnvInfo``
  (``io.mcprl.info``, with the owner's pid, start time and host), so ``list_owned`` and the reaper
  find a crashed run's containers through the engine alone.
- **processes**: ``exec`` runs a command through an attached exec (its stdin, stdout and stderr
  over the API socket); ``stdio_launch`` returns a host command, the bridge
  ``actors/provisioners/docker_attach.py``, that does the same for an MCP server, so the
  gateway's stdio client reaches a server inside the container unchanged. Each exec carries the
  environment marker ``MCPRL_ENV_ID``; on a deadline the exec's process tree is killed through its
  host pid, after checking that the pid carries the marker (an engine on another host: the process
  lives until the environment's next reset or destroy, which the pool does for a broken env).
  A listening server runs the same way, on ``0.0.0.0`` and a port of its own
  (``docker_network.LISTEN_PORT`` on), and is reached at the container's address
  (``listen_address``).

An image needs ``sleep`` (and ``sh``, for ``EnvHandle.write_file``). Secrets in a server's
environment go to the engine in the exec's ``Env``, never on a command line.
"""

from __future__ import annotations

import functools
import io
import logging
import os
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import msgspec

from actors.errors import EnvError
from actors.provisioners import docker_context, docker_network
from actors.provisioners.bwrap import ETC_FILES, SANDBOX_PATH, install_roots, outermost
from actors.provisioners.docker_exec import engine_client, env_url, exec_blocking, short
from actors.provisioners.local import owner
from specs.env import EnvConfig, EnvInfo, ExecResult, ListenAddress, ServerLaunch

logger = logging.getLogger(__name__)

WORKDIR = docker_context.WORKDIR
"""The working directory inside every container (a tmpfs); a host path bound into a container must
not lie below it (the project at ``/work/...`` would otherwise show up in the agent's directory)."""
HOSTROOT_REPO = "mcprl/hostroot"
TASK_REPO = "mcprl/task"
HOSTROOT_LABEL = "io.mcprl.hostroot"
LABEL_BACKEND, LABEL_RUN, LABEL_ENV, LABEL_INFO = (
    "io.mcprl.backend",
    "io.mcprl.run",
    "io.mcprl.env",
    "io.mcprl.info",
)
_RUNNING_TIMEOUT_S = 30.0


class DockerProvisioner:
    """Environments as confined containers on a Docker-API engine (Docker or Podman)."""

    name = "docker"
    keeps_servers = False  # a reset restarts the container: no process survives it

    def __init__(
        self,
        base_url: str | None = None,
        *,
        memory_mb: int = 2048,
        cpus: float | None = None,
        pids: int = 512,
        work_size_mb: int = 1024,
        tmp_size_mb: int = 256,
        ro_binds: Sequence[str] = (),
    ) -> None:
        """Limits here are defaults; an ``EnvConfig`` that sets one wins for its environments."""
        self.base_url = base_url or os.environ.get("DOCKER_HOST") or None
        self.memory_mb, self.cpus, self.pids = memory_mb, cpus, pids
        self.work_size_mb, self.tmp_size_mb = work_size_mb, tmp_size_mb
        self.ro_binds = tuple(os.path.abspath(p) for p in ro_binds)
        self.builds = 0  # images this provisioner built (the cache is the engine's tag list)
        self._build_locks: dict[str, anyio.Lock] = {}
        self._hostroot: str | None = None

    # -- the protocol --------------------------------------------------------------------------

    def spec(self) -> dict[str, Any]:
        return {
            "base_url": self.base_url,
            "memory_mb": self.memory_mb,
            "cpus": self.cpus,
            "pids": self.pids,
            "work_size_mb": self.work_size_mb,
            "tmp_size_mb": self.tmp_size_mb,
            "ro_binds": list(self.ro_binds),
        }

    async def create(self, config: EnvConfig, run_id: str) -> EnvInfo:
        image, hostroot = await self.ensure_image(config)
        env_id = uuid.uuid4().hex[:12]
        listeners = [s.name for s in config.servers if s.listens]
        data: dict[str, Any] = {"container": f"mcprl-{env_id}", "docker_url": self.base_url, "image": image}
        if listeners:
            data["ports"] = {name: docker_network.LISTEN_PORT + i for i, name in enumerate(listeners)}
            if not config.network:
                data["network"] = f"mcprl-{env_id}"
        info = EnvInfo(
            env_id=env_id,
            run_id=run_id,
            backend=self.name,
            key=config.key(),
            workdir=WORKDIR,
            created_at=time.time(),
            data=data | owner(),
        )
        try:
            if "network" in data:
                await anyio.to_thread.run_sync(
                    docker_network.create, self.base_url, data["network"], self.labels(info)
                )
            options = self._run_options(config, info, hostroot)
            await anyio.to_thread.run_sync(
                functools.partial(engine_client(self.base_url).containers.run, **options)
            )
        except Exception as e:
            with anyio.CancelScope(shield=True):
                await self.destroy(info)  # a container that was created but did not start
            raise EnvError(f"docker env {env_id}: cannot start a container of {image}: {short(e)}") from e
        return info

    async def reset(self, env: EnvInfo) -> None:
        """Restart: every process of the container dies, ``/workspace`` and ``/tmp`` come back empty.
        ``keep_alive`` servers die too (a restart spares nothing): ``keeps_servers`` is False, so the
        gateway parks none of their sessions."""

        def restart() -> None:
            container = engine_client(env_url(env)).containers.get(env.data["container"])
            container.restart(timeout=0)
            _wait_running(container)

        try:
            await anyio.to_thread.run_sync(restart)
        except Exception as e:
            raise EnvError(f"docker env {env.env_id}: reset (restart) failed: {short(e)}") from e

    async def health_check(self, env: EnvInfo) -> bool:
        """The container runs and an exec in it succeeds."""
        try:
            result = await self.exec(env, ["true"], timeout_s=10.0)
        except Exception as e:
            logger.warning("health check of docker env %s failed: %s", env.env_id, short(e))
            return False
        return result.returncode == 0

    async def destroy(self, env: EnvInfo) -> None:
        def remove() -> None:
            import docker.errors

            try:
                engine_client(env_url(env)).api.remove_container(env.data["container"], force=True, v=True)
            except docker.errors.NotFound:
                pass  # idempotent
            if "network" in env.data:
                docker_network.remove(env_url(env), env.data["network"])

        await anyio.to_thread.run_sync(remove)

    async def list_owned(self, run_id: str | None = None) -> list[EnvInfo]:
        labels = [f"{LABEL_BACKEND}={self.name}"] + ([f"{LABEL_RUN}={run_id}"] if run_id else [])

        def listed() -> list[dict[str, Any]]:
            return list(engine_client(self.base_url).api.containers(all=True, filters={"label": labels}))

        found: dict[str, EnvInfo] = {}
        # a network outlives its container only when a create failed between the two
        everything = await anyio.to_thread.run_sync(listed) + await anyio.to_thread.run_sync(
            docker_network.listed, self.base_url, labels
        )
        for labelled in everything:
            try:
                info = msgspec.json.decode(labelled["Labels"][LABEL_INFO], type=EnvInfo)
            except (KeyError, TypeError, msgspec.DecodeError) as e:
                logger.warning("%s has no readable %s label: %s", labelled.get("Id"), LABEL_INFO, e)
                continue
            found.setdefault(info.env_id, info)
        return list(found.values())

    async def exec(
        self, env: EnvInfo, argv: list[str], *, stdin: bytes | None = None, timeout_s: float = 60.0
    ) -> ExecResult:
        """Run ``argv`` in the container's workdir; on the deadline kill it and return code 124."""
        if not argv:
            raise EnvError(f"docker env {env.env_id}: exec needs a command, got an empty argv")
        try:
            return await anyio.to_thread.run_sync(
                functools.partial(exec_blocking, env, argv, stdin=stdin, timeout_s=timeout_s),
                abandon_on_cancel=True,  # the blocking pump ends at its own deadline
            )
        except EnvError:
            raise
        except Exception as e:
            raise EnvError(f"docker env {env.env_id}: exec of {argv[0]!r} failed: {short(e)}") from e

    async def limits_hit(self, env: EnvInfo) -> dict[str, int]:
        """The container's own cgroup event files (``limits.EVENT_FILES``, v2 or v1 layout), read
        from inside it (a reset restarts the container, so they count from there); empty when that
        exec fails (as it can at the pids limit)."""
        from actors.provisioners.limits import EVENT_FILES, tally

        paths = [f"/sys/fs/cgroup/{n}" for n in EVENT_FILES]
        paths += [f"/sys/fs/cgroup/{n.split('.')[0]}/{n}" for n in EVENT_FILES]
        show = 'for f in "$@"; do [ -r "$f" ] && { echo "# ${f##*/}"; cat "$f"; }; done; true'
        try:
            result = await self.exec(env, ["sh", "-c", show, "sh", *paths], timeout_s=10.0)
        except EnvError:
            return {}
        if result.returncode != 0:
            return {}
        texts: list[tuple[str, str]] = []
        for line in result.stdout.splitlines():
            if line.startswith("# "):
                texts.append((line[2:], ""))
            elif texts:
                texts[-1] = (texts[-1][0], texts[-1][1] + line + "\n")
        return tally(texts)

    def stdio_launch(self, env: EnvInfo, server: ServerLaunch) -> ServerLaunch:
        """The bridge ``actors/provisioners/docker_attach.py`` (on the host): an attached exec of the
        server whose stdio is the bridge's. The server's variables travel in the bridge's
        environment and are named (never valued) on its command line."""
        cwd = str(Path(WORKDIR) / server.cwd) if server.cwd else WORKDIR
        bridge = [
            "-c",
            f"import sys; sys.path.insert(0, {_project_root()!r}); "
            "from actors.provisioners.docker_attach import main; sys.exit(main())",
            "--container",
            env.data["container"],
            "--env-id",
            env.env_id,
            "--workdir",
            cwd,
            *(["--url", env_url(env)] if env_url(env) else []),
            *(["--pass-env", ",".join(sorted(server.env))] if server.env else []),
            "--",
            server.command,
            *server.args,
        ]
        return ServerLaunch(
            name=server.name,
            command=sys.executable,
            args=tuple(bridge),
            env=dict(server.env),
            cwd=None,
        )

    async def listen_address(self, env: EnvInfo, server: ServerLaunch) -> ListenAddress:
        """All of the container's addresses, on the server's own port; reached at the container's
        address on its network (found again each time: a restart may move it)."""
        port = (env.data.get("ports") or {}).get(server.name)
        if port is None:
            raise EnvError(
                f"docker env {env.env_id}: MCP server {server.name!r} listens, but the environment was "
                "created without it in its config's servers, so it has no port"
            )

        def container_address() -> str:
            container = engine_client(env_url(env)).containers.get(env.data["container"])
            return docker_network.address(container, env.data.get("network"))

        try:
            reach = await anyio.to_thread.run_sync(container_address)
        except EnvError:
            raise
        except Exception as e:
            raise EnvError(f"docker env {env.env_id}: cannot read the container's address: {short(e)}") from e
        return ListenAddress(bind="0.0.0.0", port=int(port), reach=reach)

    # -- images --------------------------------------------------------------------------------

    async def ensure_image(self, config: EnvConfig) -> tuple[str, bool]:
        """The image tag for ``config`` (built if the engine lacks it) and whether it is host-root."""
        client = engine_client(self.base_url)
        if config.image:
            image = await self._local_or_pulled(config.image)
            return config.image, HOSTROOT_LABEL in (image.labels or {})
        hostroot = await self._ensure_hostroot()
        if not config.dockerfile_path:
            return hostroot, True
        context = docker_context.dockerfile_context(config.dockerfile_path, config.build_args)
        tag = await self._build_once(TASK_REPO, context, config.build_args)
        image = await anyio.to_thread.run_sync(client.images.get, tag)
        return tag, HOSTROOT_LABEL in (image.labels or {})

    async def _local_or_pulled(self, name: str) -> Any:
        import docker.errors

        client = engine_client(self.base_url)
        try:
            return await anyio.to_thread.run_sync(client.images.get, name)
        except docker.errors.ImageNotFound:
            pass
        async with self._build_locks.setdefault(name, anyio.Lock()):
            try:
                return await anyio.to_thread.run_sync(client.images.pull, name)
            except Exception as e:
                raise EnvError(
                    f"docker backend: image {name!r} is not in the engine and could not be pulled "
                    f"({short(e)}); build or load it there first"
                ) from e

    async def _ensure_hostroot(self) -> str:
        """The host-root image, also tagged ``mcprl/hostroot:latest`` for ``FROM`` lines."""
        if self._hostroot is None:
            tag = await self._build_once(HOSTROOT_REPO, docker_context.hostroot_context())
            client = engine_client(self.base_url)
            await anyio.to_thread.run_sync(lambda: client.images.get(tag).tag(HOSTROOT_REPO, "latest"))
            self._hostroot = tag
        return self._hostroot

    async def _build_once(self, repo: str, context: bytes, build_args: dict[str, str] | None = None) -> str:
        """Build ``context`` (a tar with a ``Dockerfile``) unless its tag exists; one build per tag."""
        import docker.errors

        tag = docker_context.tag(repo, context, build_args)
        client = engine_client(self.base_url)
        async with self._build_locks.setdefault(tag, anyio.Lock()):
            try:
                await anyio.to_thread.run_sync(client.images.get, tag)
                return tag
            except docker.errors.ImageNotFound:
                pass
            logger.info("building image %s (once; later creates find the tag)", tag)
            build = functools.partial(
                client.images.build,
                fileobj=io.BytesIO(context),
                custom_context=True,
                tag=tag,
                buildargs=dict(build_args or {}),
                rm=True,
                nocache=True,  # the tag is the cache; Podman 4's layer cache ignores changed ARGs
                labels={HOSTROOT_LABEL: "1"} if repo == HOSTROOT_REPO else None,
            )
            try:
                await anyio.to_thread.run_sync(build)
            except docker.errors.BuildError as e:
                log = "".join(str(chunk.get("stream", chunk.get("error", ""))) for chunk in e.build_log)
                raise EnvError(f"docker backend: building {tag} failed: {e.msg}\n{log[-2000:]}") from e
            self.builds += 1
            logger.info("built image %s", tag)
            return tag

    # -- container options ---------------------------------------------------------------------

    def _run_options(self, config: EnvConfig, info: EnvInfo, hostroot: bool) -> dict[str, Any]:
        memory = config.memory_mb or self.memory_mb
        cpus = config.cpus or self.cpus
        binds = list(self.ro_binds)
        if hostroot:
            # /bin, /lib... are symlinks into /usr in the image; where the host has them as real
            # directories (no merged /usr), they are bound too.
            real_tops = [
                t for t in ("/bin", "/sbin", "/lib", "/lib64") if os.path.isdir(t) and not os.path.islink(t)
            ]
            binds += ["/usr", *real_tops, *(p for p in ETC_FILES if os.path.exists(p))]
            for server in config.servers:
                binds += [str(p) for p in install_roots(server.command, WORKDIR)]
        kept = outermost([Path(b) for b in binds])
        hidden = [str(p) for p in kept if Path(WORKDIR) in (p, *p.parents)]
        if hidden:
            raise EnvError(
                f"docker backend: cannot bind {hidden} read-only into containers: they lie under the "
                f"container's working directory {WORKDIR}; install the server elsewhere"
            )
        volumes = {str(path): {"bind": str(path), "mode": "ro"} for path in kept}
        return {
            "image": info.data["image"],
            "name": info.data["container"],
            "entrypoint": ["sleep"],
            "command": ["infinity"],
            "detach": True,
            "labels": self.labels(info),
            "environment": {"PATH": SANDBOX_PATH, "HOME": "/tmp", "LANG": "C.UTF-8"},
            "working_dir": WORKDIR,
            "read_only": True,
            "tmpfs": {
                WORKDIR: f"size={self.work_size_mb}m,mode=1777",
                "/tmp": f"size={self.tmp_size_mb}m,mode=1777",
            },
            "volumes": volumes,
            **({"network": info.data["network"]} if "network" in info.data else {}),
            "network_mode": None if config.network or "network" in info.data else "none",
            "mem_limit": f"{memory}m",
            "memswap_limit": f"{memory}m",
            "pids_limit": config.pids or self.pids,
            **({"nano_cpus": int(cpus * 1e9)} if cpus else {}),
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
        }

    def labels(self, info: EnvInfo) -> dict[str, str]:
        """What finds the environment's container and network in the engine alone (the reaper)."""
        return {
            LABEL_BACKEND: self.name,
            LABEL_RUN: info.run_id,
            LABEL_ENV: info.env_id,
            LABEL_INFO: msgspec.json.encode(info).decode(),
        }


def _wait_running(container: Any) -> None:
    deadline = time.monotonic() + _RUNNING_TIMEOUT_S
    while True:
        container.reload()
        if container.status == "running":
            return
        if time.monotonic() > deadline:
            raise EnvError(f"container {container.name} is {container.status!r}, not running")
        time.sleep(0.05)


@functools.cache
def _project_root() -> str:
    """Where ``actors`` is importable from, for the bridge (started with the server's environment)."""
    return str(Path(__file__).resolve().parents[2])
