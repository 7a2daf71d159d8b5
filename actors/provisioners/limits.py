"""Memory, pid and CPU limits for sandboxed environments: one cgroup per environment, else rlimits.

``find_cgroups()`` looks for where this process may create cgroups, in this order:

- **cgroup v2** (one unified hierarchy, ``/sys/fs/cgroup``): a group ``mcprl-envs`` beside this
  process's own, in the parent of its cgroup, with ``memory``, ``pids`` and ``cpu`` enabled there
  (v2 allows no processes in a group that hands controllers down, so not below our own);
- **cgroup v1** (a hierarchy per controller, ``/sys/fs/cgroup/memory`` ...): a group ``mcprl-envs``
  below this process's own in each of the ``memory``, ``pids`` and ``cpu`` hierarchies.

Each environment gets ``mcprl-envs/<env_id>`` (one per hierarchy on v1) with ``memory_mb`` (no
swap beyond it), ``pids`` and ``cpus`` (a CFS quota) written into it; everything the environment
runs is started inside it (``wrap``: a ``sh`` writes its own pid into the groups, then ``exec``s
the command, so every child is counted). The kernel's OOM killer then picks a victim inside the
environment only, and a fork past ``pids`` fails there; ``hits`` reads how often each happened.

Where neither is writable (no root, no delegation), ``wrap`` falls back to ``prlimit`` rlimits:
``RLIMIT_AS`` per *process* (not per environment), ``RLIMIT_NPROC`` (counted per user, so only
when not root: root's count holds every root process on the host), and no CPU limit. A warning
says what is not enforced.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import logging
import os
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

GROUP = "mcprl-envs"
CONTROLLERS = ("memory", "pids", "cpu")
CFS_PERIOD_US = 100_000
# Writes the pid of the ``sh`` into each cgroup.procs file named in $0, then becomes the command.
ENTER = 'for f in $0; do echo $$ > "$f" || exit 125; done; exec "$@"'


@dataclass(frozen=True)
class Limits:
    """An environment's limits; ``None``: not limited."""

    memory_mb: int | None = None
    pids: int | None = None
    cpus: float | None = None

    def __bool__(self) -> bool:
        return any(v is not None for v in (self.memory_mb, self.pids, self.cpus))

    def describe(self) -> str:
        shown = [
            f"memory {self.memory_mb} MB" if self.memory_mb else "",
            f"{self.pids} processes" if self.pids else "",
            f"{self.cpus:g} CPUs" if self.cpus else "",
        ]
        return ", ".join(s for s in shown if s) or "none"


@dataclass(frozen=True)
class Cgroups:
    """Where environment cgroups are made: ``version`` 1 or 2, and per controller the directory
    (``GROUP``) that holds one group per environment (a single directory for all on v2)."""

    version: int
    bases: dict[str, Path]

    def groups(self, env_id: str) -> list[str]:
        """The environment's group directories, one per distinct controller base."""
        return list(dict.fromkeys(str(base / env_id) for base in self.bases.values()))

    def create(self, env_id: str, limits: Limits) -> list[str]:
        """Make the environment's groups with ``limits``; the directories made."""
        made: list[str] = []
        try:
            for controller, base in self.bases.items():
                group = base / env_id
                if str(group) not in made:
                    group.mkdir(exist_ok=True)
                    made.append(str(group))
                for name, value in self._settings(controller, limits):
                    _write_if_present(group / name, value)
        except OSError:
            remove(made)
            raise
        return made

    def _settings(self, controller: str, limits: Limits) -> list[tuple[str, str]]:
        quota = str(int(limits.cpus * CFS_PERIOD_US)) if limits.cpus else None
        if self.version == 2:
            wanted = {
                "memory": [("memory.max", _mb(limits.memory_mb)), ("memory.swap.max", "0")],
                "pids": [("pids.max", str(limits.pids) if limits.pids else None)],
                "cpu": [("cpu.max", f"{quota} {CFS_PERIOD_US}" if quota else None)],
            }
        else:
            memory = _mb(limits.memory_mb)
            wanted = {  # memsw (memory + swap) may only be set once the memory limit is
                "memory": [("memory.limit_in_bytes", memory), ("memory.memsw.limit_in_bytes", memory)],
                "pids": [("pids.max", str(limits.pids) if limits.pids else None)],
                "cpu": [
                    ("cpu.cfs_period_us", str(CFS_PERIOD_US) if quota else None),
                    ("cpu.cfs_quota_us", quota),
                ],
            }
        return [(name, value) for name, value in wanted[controller] if value is not None]


@functools.cache
def find_cgroups(root: str = "/sys/fs/cgroup") -> Cgroups | None:
    """Where this process can make environment cgroups, or ``None`` (then rlimits only)."""
    try:
        own = _own_cgroups()
        found = _find_v2(Path(root), own) if own.keys() == {""} else _find_v1(Path(root), own)
    except OSError as e:
        logger.warning("no cgroup can be made here (%s): environment limits fall back to rlimits", e)
        return None
    if found is None:
        logger.warning("no writable cgroup here: environment limits fall back to rlimits")
    return found


def wrap(command: list[str], groups: list[str], limits: Limits) -> list[str]:
    """``command`` started inside the environment's ``groups`` (``Cgroups.create``), or under
    rlimits when it has none."""
    if groups:
        procs = " ".join(str(Path(g) / "cgroup.procs") for g in groups)
        return ["/bin/sh", "-c", ENTER, procs, *command]
    rlimits = []
    if limits.memory_mb:
        rlimits.append(f"--as={limits.memory_mb * 1024 * 1024}")
    if limits.pids and os.geteuid() != 0:
        rlimits.append(f"--nproc={limits.pids}")
    prlimit = shutil.which("prlimit")
    if not rlimits or prlimit is None:
        return command
    return [prlimit, *rlimits, "--", *command]


def unenforced(limits: Limits, has_groups: bool) -> Limits:
    """The part of ``limits`` that ``wrap`` cannot enforce here."""
    if has_groups:
        return Limits()
    if shutil.which("prlimit") is None:
        return limits
    return Limits(pids=limits.pids if os.geteuid() == 0 else None, cpus=limits.cpus)


EVENT_FILES = ("memory.events", "memory.oom_control", "pids.events")
"""The files ``tally`` reads: v2's ``memory.events`` or v1's ``memory.oom_control`` (both count
``oom_kill``), and ``pids.events`` (``max``: forks refused)."""


def hits(groups: list[str]) -> dict[str, int]:
    """How often the environment of ``groups`` hit a limit (``tally``)."""
    texts = []
    for group in map(Path, groups):
        for name in EVENT_FILES:
            try:
                texts.append((name, (group / name).read_text()))
            except OSError:
                continue
    return tally(texts)


def tally(texts: list[tuple[str, str]]) -> dict[str, int]:
    """``memory`` (processes the OOM killer ended) and ``pids`` (forks refused) from the contents
    of a group's event files, ``(file name, text)``."""
    counts = {"memory": 0, "pids": 0}
    for name, text in texts:
        pairs = (line.split() for line in text.splitlines())
        events = {p[0]: int(p[1]) for p in pairs if len(p) == 2 and p[1].isdigit()}
        if name.startswith("memory."):
            counts["memory"] += events.get("oom_kill", 0)
        elif name == "pids.events":
            counts["pids"] += events.get("max", 0)
    return counts


REMOVE_WAIT_S = 5.0
"""How long ``remove`` waits by default for a group's last processes to finish dying."""


def remove(groups: list[str], wait_s: float | None = None) -> list[str]:
    """Remove the environment's groups once their processes are gone (killed by the caller); the
    groups still there after ``wait_s`` (``REMOVE_WAIT_S``), busy with processes that are still
    exiting (the caller retries them later: ``bwrap.BwrapProvisioner``'s pending groups)."""
    deadline = time.monotonic() + (REMOVE_WAIT_S if wait_s is None else wait_s)
    left: list[str] = []
    for group in map(Path, groups):
        while True:
            try:
                group.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError as e:  # EBUSY while the last processes finish dying
                if time.monotonic() >= deadline:
                    logger.debug("cgroup %s not removed yet: %s", group, e)
                    left.append(str(group))
                    break
                time.sleep(0.05)
    return left


def retry_pending(pending: Path, add: Sequence[str] = ()) -> list[str]:
    """Remove the groups listed in the file ``pending`` (one path per line) that are empty now,
    after adding ``add`` to them, and keep the rest listed; the ones still pending. For groups that
    ``remove`` gave up on while their environment's record goes: nothing else would find them
    again. Serialised across processes by a lock on the file; a group gone already counts as
    removed."""
    if not add and (not pending.exists() or pending.stat().st_size == 0):
        return []
    try:
        with open(pending, "a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)  # released on close
            f.seek(0)
            listed = list(dict.fromkeys([*f.read().split(), *add]))  # no whitespace: ``_usable``
            left = remove(listed, wait_s=0)
            f.seek(0)
            f.truncate()
            f.write("".join(f"{group}\n" for group in left))
    except OSError as e:
        logger.warning("pending cgroups in %s not retried: %s", pending, e)
        return list(add)
    return left


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup per controller (``""``: the v2 hierarchy), from ``/proc/self/cgroup``."""
    own: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            own[controller] = path
    return own


def _find_v2(root: Path, own: dict[str, str]) -> Cgroups | None:
    if not (root / "cgroup.controllers").exists():
        return None
    own_dir = root / own[""].lstrip("/")
    parent = own_dir if own_dir == root else own_dir.parent  # a namespace's root has no parent here
    enabled = set((parent / "cgroup.subtree_control").read_text().split())
    if not set(CONTROLLERS) <= enabled:
        return None
    base = parent / GROUP
    base.mkdir(exist_ok=True)
    (base / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in CONTROLLERS))
    return Cgroups(2, {c: base for c in CONTROLLERS}) if _usable(base) else None


def _find_v1(root: Path, own: dict[str, str]) -> Cgroups | None:
    bases = {}
    for controller in CONTROLLERS:
        mount = root / controller
        if controller not in own or not (mount / "cgroup.procs").exists():
            return None
        base = mount / own[controller].lstrip("/") / GROUP
        base.mkdir(exist_ok=True)
        if not _usable(base):
            return None
        bases[controller] = base
    return Cgroups(1, bases)


def _usable(base: Path) -> bool:
    """A group can be made, and removed, below ``base``; no whitespace in its path (``wrap``)."""
    if any(c.isspace() for c in str(base)):
        return False
    probe = base / f"probe-{os.getpid()}"
    try:
        probe.mkdir(exist_ok=True)
        probe.rmdir()
    except OSError as e:
        errno_name = errno.errorcode.get(e.errno or 0, str(e.errno))
        logger.warning("cannot make a cgroup below %s (%s: %s)", base, errno_name, e.strerror)
        return False
    return True


def _mb(value: int | None) -> str | None:
    return str(value * 1024 * 1024) if value else None


def _write_if_present(path: Path, value: str) -> None:
    """Write a limit; a file this kernel lacks (``memsw`` without swap accounting) is skipped."""
    if path.exists():
        path.write_text(value)
