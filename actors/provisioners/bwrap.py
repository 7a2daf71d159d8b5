"""Bubblewrap provisioner: every process of an environment runs in a daemonless namespace sandbox.

An environment is a host directory, laid out and labelled exactly as the local backend's
(``<root>/<run_id>/<env_id>/{label.json,work,home,tmp}``, default root ``$TMPDIR/mcprl-bwrap-envs``;
``tmp`` stays unused: each sandbox gets a private ``/tmp``),
so ``list_owned`` and the pool's reaper work the same way. Nothing runs until the gateway starts a
server (``stdio_launch``) or a hook or evaluator runs a command (``exec``); each such process gets
its own fresh ``bwrap`` sandbox, and all of them share the environment's files:

- new mount, pid, network, ipc, uts, user and cgroup namespaces (``--unshare-all``), all
  capabilities dropped, no new privileges (bwrap always sets it);
- read-only: ``/usr`` (with ``/bin``, ``/lib``... as on the host), a few ``/etc`` files that
  programs need (passwd, hosts, ld.so cache, alternatives), the installation the command lives in
  (its ``bin/..`` prefix, following symlinks, ``#!`` interpreters and a venv's base interpreter:
  ``.cache/servers/calculator`` *and* ``/root/.pyenv/versions/3.11.7``), and ``ro_binds``;
- read-write: the environment's ``work`` and ``home`` directories, at the *same paths* as on the
  host, so ``EnvInfo.workdir`` names the same files on both sides (a fixed ``/work`` would collide
  with host paths such as a project under ``/work``: bwrap would create the mount points of the
  read-only binds inside the environment's work dir); ``/tmp`` is a private tmpfs per sandbox;
- network: only loopback, one per environment, shared by its sandboxes (a server reaches what
  another process of the environment serves on ``127.0.0.1``): no egress, no host ports, nothing
  of another environment. Where this process is not root, each sandbox has a loopback of its own
  instead (``actors.provisioners.bwrap_net``).

This is isolation by Linux namespaces, not a virtual machine: the sandbox shares the host kernel.
Limits (``memory_mb``, default 2048; ``pids``, default 512; ``cpus``, default none; an
``EnvConfig`` that sets one wins) hold for the whole environment: it gets a cgroup of its own
(v2, or v1 where the controllers live there) and every sandbox starts inside it, so a memory hog
or a fork bomb in a tool ends or stalls that environment only; ``limits_hit`` says which limit it
hit. Without a writable cgroup (no root, no delegation) they fall back to rlimits, per process and
weaker, with a warning (``actors.provisioners.limits``). A cgroup still busy when its environment
is destroyed (processes slow to exit) is removed later, by the root's next ``create`` or
``destroy`` (``PENDING_GROUPS``). Images (``image``, ``dockerfile_path``) need the docker backend.

Processes are marked as on the local backend (``MCPRL_ENV_ID`` in their environment; children
inherit it), so ``reset``/``destroy`` find them; killing a sandbox's outer ``bwrap`` takes its whole
pid namespace down (``--die-with-parent`` kills the namespace's init, and the kernel kills every
process of a namespace whose init dies). A ``keep_alive`` server's sandbox also carries
``MCPRL_KEEP_ALIVE``: ``reset`` spares it, whole, and empties the bound directories in place.
``--die-with-parent`` also ends a sandbox when the process that started it dies, so a crashed
gateway leaves none behind, with one gap seen here: an owner that dies within milliseconds of the
spawn (before bwrap armed the signal in its child) can orphan the sandbox; it still carries the
marker, so the reaper's ``destroy`` kills it. The signal tracks the parent *thread*: start
sandboxes from the event loop thread, never a worker thread.

No ``--clearenv``: it would force a server's secrets onto bwrap's command line, which any user can
read in ``/proc/<pid>/cmdline`` and which ``ServerLaunch``'s repr prints. Instead the sandbox
inherits bwrap's environment, which the caller controls: ``exec`` starts bwrap with the marker
alone; ``stdio_launch`` returns the server's variables as the launch environment, and its command
line unsets the few variables the MCP SDK's stdio client adds and sets ``PATH``,
``HOME``, ``TMPDIR`` and ``LANG``.

Unlike the local backend, a background process that an ``exec`` leaves running dies when that
``exec`` returns (its pid namespace ends): a service that must outlive a hook has to be an MCP
server. A missing command is an ``ExecResult`` with code 1 and bwrap's message, not an exception.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import msgspec
import psutil

from actors.errors import EnvError
from actors.provisioners import bwrap_net, limits
from actors.provisioners.limits import Limits
from actors.provisioners.local import (
    ENV_MARKER,
    LocalProvisioner,
    checked_dir,
    dir_healthy,
    keep_marker,
    kill_all,
    killpg,
    marked_processes,
    run_with_deadline,
    write_label,
)
from specs.env import EnvConfig, EnvInfo, ExecResult, ListenAddress, ServerLaunch

logger = logging.getLogger(__name__)

SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
_TOP_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Files programs need (user names, localhost, the loader cache, Debian's alternatives); no secrets.
ETC_FILES = (
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/hosts",
    "/etc/localtime",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
)
# What the MCP SDK's stdio client adds to a server's environment on POSIX
# (``mcp.client.stdio.DEFAULT_INHERITED_ENV_VARS``; the tests pin that none of it leaks in).
_SDK_INHERITED = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")
_HEALTH_TIMEOUT_S = 10.0


def default_root() -> Path:
    return Path(tempfile.gettempdir()) / "mcprl-bwrap-envs"


class BwrapProvisioner(LocalProvisioner):
    """Environments as host dirs (the local layout); every process in its own bubblewrap sandbox.

    ``ro_binds`` (host paths, bound read-only at the same path), ``tmp_size_mb`` (the size cap of
    each sandbox's ``/tmp``) and the environment's limits and cgroups are recorded in the
    ``EnvInfo`` at ``create``, so a default ``BwrapProvisioner()`` in another process (the
    gateway's, through ``make_provisioner``) builds the same sandboxes. The limits here are
    defaults; an ``EnvConfig`` that sets one wins for its environments. ``cgroups=False`` uses
    rlimits even where a cgroup could be made."""

    name = "bwrap"

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        ro_binds: Sequence[str] = (),
        tmp_size_mb: int = 1024,
        memory_mb: int | None = 2048,
        pids: int | None = 512,
        cpus: float | None = None,
        cgroups: bool = True,
    ) -> None:
        super().__init__(root if root is not None else default_root())
        self.ro_binds = tuple(os.path.abspath(p) for p in ro_binds)
        self.tmp_size_mb = tmp_size_mb
        self.memory_mb, self.pids, self.cpus = memory_mb, pids, cpus
        self.cgroups = cgroups

    async def create(self, config: EnvConfig, run_id: str) -> EnvInfo:
        bwrap_path()  # fail at create, with the fix, rather than at the first server start
        refused = {
            k: v for k, v in (("image", config.image), ("dockerfile_path", config.dockerfile_path)) if v
        }
        if refused:
            raise EnvError(f"bwrap backend cannot run container images ({refused}); use the docker backend")
        if config.network:
            raise EnvError("bwrap backend has no network egress (EnvConfig.network=True); use docker")
        info = await super().create(config, run_id)
        wanted = Limits(
            memory_mb=config.memory_mb or self.memory_mb,
            pids=config.pids or self.pids,
            cpus=config.cpus or self.cpus,
        )
        try:
            groups = await anyio.to_thread.run_sync(self._make_groups, info.env_id, wanted)
            netns = await anyio.to_thread.run_sync(bwrap_net.create, Path(info.data["env_dir"]))
            info = msgspec.structs.replace(
                info,
                data=info.data | {"limits": msgspec.to_builtins(wanted), "cgroups": groups, "netns": netns},
            )
            await anyio.to_thread.run_sync(write_label, Path(info.data["env_dir"]), msgspec.json.encode(info))
        except OSError as e:
            await self.destroy(info)
            raise EnvError(
                f"bwrap env {info.env_id}: cannot set its limits ({wanted.describe()}): {e}"
            ) from e
        return info

    def _make_groups(self, env_id: str, wanted: Limits) -> list[str]:
        limits.retry_pending(self.root / PENDING_GROUPS)
        cgroups = limits.find_cgroups() if self.cgroups and wanted else None
        if weak := limits.unenforced(wanted, cgroups is not None):
            _warn_once(f"bwrap environments: limits not enforced on this host: {weak.describe()}")
        return cgroups.create(env_id, wanted) if cgroups is not None else []

    def spec(self) -> dict[str, Any]:
        return {
            "root": str(self.root),
            "ro_binds": list(self.ro_binds),
            "tmp_size_mb": self.tmp_size_mb,
            "memory_mb": self.memory_mb,
            "pids": self.pids,
            "cpus": self.cpus,
            "cgroups": self.cgroups,
        }

    def _env_data(self) -> dict[str, Any]:
        return {"ro_binds": list(self.ro_binds), "tmp_size_mb": self.tmp_size_mb}

    async def reset(self, env: EnvInfo) -> None:
        """Kill every sandbox of the environment but its ``keep_alive`` servers'; empty its
        directories; count its limit hits from here on (``limits_hit``)."""
        await anyio.to_thread.run_sync(kill_env_processes, env.env_id, True)
        await super().reset(env)
        if groups := groups_of(env):
            seen = await anyio.to_thread.run_sync(limits.hits, groups)
            await anyio.to_thread.run_sync(_write_hits_base, env, seen)

    async def health_check(self, env: EnvInfo) -> bool:
        """The directories are intact and a sandbox still starts (namespaces can run out)."""
        if not await anyio.to_thread.run_sync(dir_healthy, env):
            return False
        try:
            result = await self.exec(env, ["true"], timeout_s=_HEALTH_TIMEOUT_S)
        except (EnvError, OSError):
            logger.exception("health check of bwrap env %s failed", env.env_id)
            return False
        if result.returncode != 0:
            logger.warning("bwrap env %s: a sandbox did not start: %s", env.env_id, result.stderr.strip())
        return result.returncode == 0

    async def destroy(self, env: EnvInfo) -> None:
        await anyio.to_thread.run_sync(kill_env_processes, env.env_id)
        # From the directory, not the label: an environment stopped between its namespace and the
        # label that records it (its node killed) still holds one.
        if env.data.get("env_dir"):
            await anyio.to_thread.run_sync(
                bwrap_net.remove, str(bwrap_net.held_in(Path(env.data["env_dir"])))
            )
        await anyio.to_thread.run_sync(self._remove_groups, env)
        await super().destroy(env)

    def _remove_groups(self, env: EnvInfo) -> None:
        """Remove the cgroups its label records; for a label written before they were recorded (the
        environment stopped in between), the ones ``create`` makes for its id on this host. A group
        still busy after ``limits.REMOVE_WAIT_S`` (processes slow to exit under load) joins this
        root's pending groups: the label goes with the environment, so the reaper would never see
        it again."""
        if "cgroups" in env.data or not self.cgroups:
            groups = groups_of(env)
        else:
            found = limits.find_cgroups()
            groups = found.groups(env.env_id) if found is not None else []
        if left := limits.remove(groups):
            logger.warning(
                "bwrap env %s: cgroups %s busy; removed at a later create or destroy", env.env_id, left
            )
        limits.retry_pending(self.root / PENDING_GROUPS, add=left)

    async def limits_hit(self, env: EnvInfo) -> dict[str, int]:
        """How often the environment hit its ``memory`` limit (processes the kernel killed) and its
        ``pids`` limit (forks refused) since its last reset; empty without a cgroup."""
        groups = groups_of(env)
        if not groups:
            return {}
        now = await anyio.to_thread.run_sync(limits.hits, groups)
        base = await anyio.to_thread.run_sync(_read_hits_base, env)
        return {k: v - base.get(k, 0) for k, v in now.items()}

    async def list_owned(self, run_id: str | None = None) -> list[EnvInfo]:
        return [env for env in await super().list_owned(run_id) if env.backend == self.name]

    async def exec(
        self, env: EnvInfo, argv: list[str], *, stdin: bytes | None = None, timeout_s: float = 60.0
    ) -> ExecResult:
        """Run ``argv`` in a fresh sandbox of the environment, in its workdir; on timeout kill the
        sandbox (its whole pid namespace) and return code 124 with a note on stderr."""
        if not argv:
            raise EnvError(f"bwrap env {env.env_id}: exec needs a command, got an empty argv")
        await anyio.to_thread.run_sync(checked_dir, env)
        args = await anyio.to_thread.run_sync(sandbox_args, env, argv[0], env.workdir, {})
        command = limited(env, bwrap_net.entered(env.data.get("netns"), [bwrap_path(), *args, "--", *argv]))
        return await run_with_deadline(
            command,
            env=env,
            environ={ENV_MARKER: env.env_id},  # bwrap's environment becomes the sandbox's: nothing of ours
            stdin=stdin,
            timeout_s=timeout_s,
            kill=kill_tree,  # the sandbox's whole pid namespace
            name=argv[0],
        )

    def stdio_launch(self, env: EnvInfo, server: ServerLaunch) -> ServerLaunch:
        """``bwrap <sandbox> -- <server command>``; the server's variables travel in the launch's
        environment (never on the command line), with the env marker added."""
        cwd = str(Path(env.workdir) / server.cwd) if server.cwd else env.workdir
        server_env = dict(server.env) | keep_marker(server)
        args = sandbox_args(env, server.command, cwd, server_env)
        sandbox = [bwrap_path(), *args, "--", server.command, *server.args]
        command = limited(env, bwrap_net.entered(env.data.get("netns"), sandbox))
        return ServerLaunch(
            name=server.name,
            command=command[0],
            args=tuple(command[1:]),
            env=server_env | {ENV_MARKER: env.env_id},
            cwd=env.workdir,
        )

    async def listen_address(self, env: EnvInfo, server: ServerLaunch) -> ListenAddress:
        """None: an environment's loopback (its own network namespace) is not reachable from here."""
        raise EnvError(
            f"bwrap env {env.env_id}: MCP server {server.name!r} listens ({server.transport}), and a "
            "bubblewrap environment has no network that this host reaches; give it a 'stdio' entry, "
            "or run it on the docker backend (a container network of its own) or the local one"
        )


@functools.cache
def _warn_once(message: str) -> None:
    logger.warning(message)


def groups_of(env: EnvInfo) -> list[str]:
    """The environment's cgroup directories (recorded at ``create``)."""
    return [str(g) for g in env.data.get("cgroups") or []]


PENDING_GROUPS = "cgroups-pending"
"""Under a provisioner's root: the cgroups of its destroyed environments still busy then
(``limits.retry_pending``)."""

HITS_BASE = "limits_base.json"
"""The limit counters at the environment's last reset, beside its label."""


def _write_hits_base(env: EnvInfo, seen: dict[str, int]) -> None:
    (Path(env.data["env_dir"]) / HITS_BASE).write_bytes(msgspec.json.encode(seen))


def _read_hits_base(env: EnvInfo) -> dict[str, int]:
    try:
        return msgspec.json.decode((Path(env.data["env_dir"]) / HITS_BASE).read_bytes(), type=dict[str, int])
    except (OSError, msgspec.DecodeError):
        return {}


def limited(env: EnvInfo, command: list[str]) -> list[str]:
    """``command`` (a bwrap) started inside the environment's cgroups, or under its rlimits."""
    wanted = msgspec.convert(env.data.get("limits") or {}, Limits)
    return limits.wrap(command, groups_of(env), wanted) if wanted else command


@functools.cache  # a failure raises, and is not cached: installing bwrap later works
def bwrap_path() -> str:
    found = shutil.which("bwrap")
    if found is None:
        raise EnvError(
            "bwrap backend: the `bwrap` executable is not on PATH; install bubblewrap "
            "(Debian/Ubuntu: apt-get install bubblewrap)"
        )
    return found


def sandbox_args(env: EnvInfo, command: str, cwd: str, own_env: dict[str, str]) -> list[str]:
    """bwrap's options (everything before ``--``) for running ``command`` inside ``env``.

    Order matters: a later mount hides what an earlier one put below it, so ``/tmp`` (tmpfs) comes
    before every bind (environments live under ``/tmp`` by default), and the writable environment
    dirs come last (they stay writable even below a read-only bind)."""
    env_dir = Path(env.data.get("env_dir", ""))
    home, work = str(env_dir / "home"), env.workdir
    size = int(env.data.get("tmp_size_mb", 1024)) * 1024 * 1024
    args = ["--unshare-all", *(["--share-net"] if env.data.get("netns") else [])]  # the env's own (bwrap_net)
    args += ["--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    args += ["--proc", "/proc", "--dev", "/dev"]
    args += [*(["--size", str(size)] if _has_tmpfs_size() else []), "--tmpfs", "/tmp"]
    system_args, covered = _system_binds()
    args += system_args
    host_cwd = cwd if os.path.isabs(cwd) else os.path.join(work, cwd)
    for root in outermost([*install_roots(command, host_cwd), *map(Path, env.data.get("ro_binds", []))]):
        if root == env_dir or root in env_dir.parents:  # would show every other environment's files
            logger.warning("bwrap env %s: not binding %s, it contains the environment", env.env_id, root)
        elif not any(root == c or c in root.parents for c in (*covered, Path(work), Path(home))):
            args += ["--ro-bind", str(root), str(root)]
    args += ["--bind", work, work, "--bind", home, home, "--chdir", cwd]
    sandbox_env = {"PATH": SANDBOX_PATH, "HOME": home, "TMPDIR": "/tmp", "LANG": "C.UTF-8"}
    for name in _SDK_INHERITED:
        if name not in own_env and name not in sandbox_env:
            args += ["--unsetenv", name]
    for name, value in (sandbox_env | {ENV_MARKER: env.env_id}).items():
        if name not in own_env or name == ENV_MARKER:
            args += ["--setenv", name, value]
    return args


@functools.cache
def _has_tmpfs_size() -> bool:
    """bwrap >= 0.8 caps a tmpfs with ``--size``; older ones (Ubuntu 22.04: 0.6) refuse the option."""
    shown = subprocess.run([bwrap_path(), "--help"], capture_output=True, text=True, timeout=10, check=False)
    return "--size" in shown.stdout + shown.stderr


@functools.cache
def _system_binds() -> tuple[tuple[str, ...], tuple[Path, ...]]:
    """bwrap options for the host's system files, and the paths they make visible.

    ``/bin``, ``/lib``... are symlinks into ``/usr`` on merged-usr systems and real directories on
    older ones: mirror whichever the host has."""
    args: list[str] = ["--ro-bind", "/usr", "/usr"]
    covered = [Path("/usr")]
    for top in _TOP_DIRS:
        path = Path(top)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), top]
        elif path.is_dir():
            args += ["--ro-bind", top, top]
        covered.append(path)
    for name in ETC_FILES:
        args += ["--ro-bind-try", name, name]
        covered.append(Path(name))
    return tuple(args), tuple(covered)


def install_roots(command: str, cwd: str) -> list[Path]:
    """Host directories ``command`` needs to run: the installation prefix (``bin/..``) of the
    command, of each symlink it resolves through, of its ``#!`` interpreter, and a virtual
    environment's base installation (``home`` in ``pyvenv.cfg``). A bare name is found through the
    sandbox's ``PATH`` inside the system binds, so it needs none."""
    if "/" not in command:
        return []
    todo = [Path(os.path.abspath(os.path.join(cwd, command)))]
    seen: set[Path] = set()
    roots: list[Path] = []
    while todo and len(seen) < 32:  # a symlink loop must not hang a server start
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        roots.append(_prefix(path))
        if path.is_symlink():
            todo.append(Path(os.path.abspath(os.path.join(path.parent, os.readlink(path)))))
        todo.extend(_venv_base(_prefix(path)) + _shebang(path))
    return [root for root in roots if root.exists() and root != Path("/")]


def _prefix(path: Path) -> Path:
    """``/opt/py/bin/python`` -> ``/opt/py``, unless that would bind a whole home directory; a file
    of an npm installation (``<prefix>/node_modules/...``) -> ``<prefix>``: its packages require
    their siblings."""
    if "node_modules" in path.parts[:-1]:
        return Path(*path.parts[: path.parts.index("node_modules")])
    if path.parent.name not in ("bin", "sbin"):
        return path.parent
    prefix = path.parent.parent
    too_broad = prefix in (Path("/"), Path("/home"), Path.home()) or prefix.parent == Path("/home")
    return path.parent if too_broad else prefix


def _venv_base(prefix: Path) -> list[Path]:
    try:
        lines = (prefix / "pyvenv.cfg").read_text().splitlines()
    except OSError:
        return []
    homes = [line.split("=", 1)[1].strip() for line in lines if line.split("=", 1)[0].strip() == "home"]
    return [Path(home) / "python3" for home in homes if os.path.isabs(home)]


def _shebang(path: Path) -> list[Path]:
    """The absolute interpreter of a ``#!`` script (``#!/usr/bin/env x`` needs nothing more)."""
    try:
        with path.open("rb") as f:
            head = f.read(256)
    except OSError:
        return []
    if not head.startswith(b"#!"):
        return []
    words = head[2:].split(b"\n", 1)[0].decode(errors="replace").split()
    return [Path(words[0])] if words and os.path.isabs(words[0]) else []


def outermost(paths: Sequence[Path]) -> list[Path]:
    """Sorted, without duplicates and without paths inside another one of the list."""
    kept: list[Path] = []
    for path in sorted(set(paths)):
        if not any(k == path or k in path.parents for k in kept):
            kept.append(path)
    return kept


def kill_env_processes(env_id: str, spare_kept: bool = False) -> int:
    """SIGKILL every sandbox of the environment and all it contains (``spare_kept``: but the
    ``keep_alive`` servers' sandboxes); wait (bounded) until gone. A sandboxed process may clear
    its environment: as a descendant of a marked bwrap it is found anyway."""
    victims = marked_processes(env_id, spare_kept, descendants=True)
    kill_all(victims)
    return len(victims)


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` (an outer bwrap, leader of its own group) and its descendants; wait until gone.

    The namespace's init is among them, and the kernel lets it finish dying only once every other
    process of its namespace is dead, so its death means the sandbox is empty."""
    try:
        root = psutil.Process(pid)
        victims = [root, *root.children(recursive=True)]
    except psutil.Error:
        victims = []
    killpg(pid)
    kill_all(victims)
