"""One network namespace per bwrap environment, shared by all of its sandboxes.

A sandbox made with ``--unshare-all`` gets a network namespace of its own, with a loopback nothing
else reaches. An environment is meant to be one host, though: a browser server must reach the web
app its environment serves, a client the database another process listens for on loopback. So,
where this process may (root, with util-linux's ``unshare`` and ``nsenter``), an environment gets
one namespace at create, held by a bind mount on ``<env_dir>/netns``: its loopback up and nothing
else (no interface out, so no egress). Every sandbox of the environment starts inside it
(``nsenter --net=<file> bwrap --unshare-all --share-net ...``); destroy unmounts it. Where it may
not, each sandbox keeps a namespace of its own, and one warning says so.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

logger = logging.getLogger(__name__)

NETNS_FILE = "netns"
"""The bind mount that holds an environment's namespace, in its directory."""

_LOOPBACK_UP = """
import fcntl, socket, struct
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
request = struct.pack("16sH14x", b"lo", 0)
flags = struct.unpack("16sH14x", fcntl.ioctl(s, 0x8913, request))[1]  # SIOCGIFFLAGS
fcntl.ioctl(s, 0x8914, struct.pack("16sH14x", b"lo", flags | 1))  # SIOCSIFFLAGS, IFF_UP
"""


@functools.cache
def why_not_shared() -> str | None:
    """Why the sandboxes of an environment cannot share a network namespace here (``None``: they can)."""
    if os.geteuid() != 0:
        return "not root (a network namespace held by a bind mount needs CAP_SYS_ADMIN)"
    missing = [tool for tool in ("unshare", "nsenter") if shutil.which(tool) is None]
    return f"{' and '.join(missing)} not found (util-linux)" if missing else None


def create(env_dir: Path) -> str | None:
    """A fresh namespace for the environment in ``env_dir``, its loopback up: the file that holds
    it, or ``None`` (with a warning, once) where none can be made."""
    why = why_not_shared()
    if why is None:
        held = held_in(env_dir)
        held.touch()
        try:
            _run(["unshare", f"--net={held}", "true"])
            up = (
                ["ip", "link", "set", "lo", "up"]
                if shutil.which("ip")
                else [sys.executable, "-c", _LOOPBACK_UP]
            )
            _run(["nsenter", f"--net={held}", "--", *up])
            return str(held)
        except (OSError, subprocess.CalledProcessError) as e:
            remove(str(held))
            why = f"{e}: {getattr(e, 'stderr', '') or ''}".strip()
    _warn_once(f"bwrap: each sandbox has a network namespace of its own, not one per environment: {why}")
    return None


def held_in(env_dir: Path) -> Path:
    """Where the namespace of the environment in ``env_dir`` is held, when it has one."""
    return env_dir / NETNS_FILE


def entered(held: str | None, command: list[str]) -> list[str]:
    """``command`` (a bwrap) run inside the namespace held at ``held`` (as is without one)."""
    return command if held is None else ["nsenter", f"--net={held}", "--", *command]


def remove(held: str | None) -> None:
    """Unmount and delete the file that holds a namespace (the namespace ends with its last process)."""
    if held is None or not os.path.exists(held):
        return
    done = subprocess.run(["umount", held], capture_output=True, text=True, check=False)
    if done.returncode != 0 and "not mounted" not in done.stderr:
        logger.warning("could not unmount %s: %s", held, done.stderr.strip())
    Path(held).unlink(missing_ok=True)


def _run(argv: list[str]) -> None:
    subprocess.run(argv, capture_output=True, text=True, check=True, timeout=30)


@functools.cache
def _warn_once(message: str) -> None:
    logger.warning(message)
