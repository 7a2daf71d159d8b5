"""A network of its own for a container whose MCP servers listen: reachable from this host, no egress.

A container with no listening server has no network at all (``network_mode="none"``). One whose
servers listen (``ServerLaunch.listens``) joins a bridge network made for it alone, ``internal``
(the engine gives it no route out: ``Network is unreachable`` to any outside address), labelled
with the run and the environment like the container, and removed with it. This host reaches the
container's address on that bridge, and nothing else shares the bridge.

One hole is left by the engine: the bridge's gateway address is this host, so from inside, the
container could open connections to any service of this host that listens on all addresses. The
*guard* closes it where this process can: a firewall rule (``iptables``, this host's, so only for
an engine on this host: a ``unix://`` socket) rejecting every new connection that comes from the
network's subnet, while the connections this host opens to the container (and their replies) pass.
Where no guard can be set (an engine elsewhere, no ``iptables``, no root), a warning says so once.
"""

from __future__ import annotations

import functools
import logging
import shutil
import subprocess
from typing import Any

from actors.errors import EnvError
from actors.provisioners.docker_exec import engine_client

logger = logging.getLogger(__name__)

LISTEN_PORT = 8000
"""The first port a container's listeners get (one each, in the order of the config's servers):
the container's network namespace is its own, so the same ports serve every container."""
GUARD_COMMENT = "mcprl: an environment network may not open connections to this host"


def guard_rule(subnet: str) -> list[str]:
    """The ``iptables`` rule (after ``-I INPUT`` / ``-D INPUT``) that rejects new connections from
    ``subnet`` to this host; established ones (replies to this host's own) pass."""
    return [
        "-s",
        subnet,
        "-m",
        "conntrack",
        "--ctstate",
        "NEW",
        "-m",
        "comment",
        "--comment",
        GUARD_COMMENT,
        "-j",
        "REJECT",
    ]


def create(base_url: str | None, name: str, labels: dict[str, str]) -> None:
    """Make the internal network ``name`` and guard it."""
    network = engine_client(base_url).networks.create(name, driver="bridge", internal=True, labels=labels)
    subnet = _subnet(network)
    if not subnet:
        remove(base_url, name)
        raise EnvError(f"docker backend: network {name} got no subnet from the engine ({network.attrs})")
    _firewall("-I", subnet, base_url)


def remove(base_url: str | None, name: str) -> None:
    """Remove the network and its guard; idempotent."""
    import docker.errors

    try:
        network = engine_client(base_url).networks.get(name)
    except docker.errors.NotFound:
        return
    subnet = _subnet(network)
    if subnet:
        _firewall("-D", subnet, base_url)
    try:
        network.remove()
    except docker.errors.NotFound:
        pass


def listed(base_url: str | None, labels: list[str]) -> list[dict[str, Any]]:
    """Every network that carries all of ``labels`` (``key=value``), as the engine describes it
    (``Id``, ``Labels``, ...)."""
    return [dict(n.attrs) for n in engine_client(base_url).networks.list(filters={"label": labels})]


def _subnet(network: Any) -> str:
    network.reload()
    configs = (network.attrs.get("IPAM") or {}).get("Config") or [{}]
    return str(configs[0].get("Subnet") or "")


def address(container: Any, network: str | None) -> str:
    """The container's address on ``network`` (its only network when ``None``)."""
    container.reload()
    networks: dict[str, Any] = container.attrs.get("NetworkSettings", {}).get("Networks") or {}
    found = [n.get("IPAddress") for name, n in networks.items() if network in (None, name)]
    if not found or not found[0]:
        raise EnvError(
            f"container {container.name} has no address on network {network or '(any)'}: {networks}"
        )
    return str(found[0])


def _firewall(action: str, subnet: str, base_url: str | None) -> None:
    why = _no_guard(base_url)
    if why:
        _warn_once(
            f"docker backend: containers whose MCP servers listen can open connections to this "
            f"host's services on their network's gateway address: {why}"
        )
        return
    argv = ["iptables", "-w", action, "INPUT", *guard_rule(subnet)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if done.returncode != 0 and action == "-I":
        raise EnvError(
            f"docker backend: cannot guard network {subnet}: {' '.join(argv)}: {done.stderr.strip()}"
        )
    if done.returncode != 0:
        logger.warning("could not remove the guard of %s: %s", subnet, done.stderr.strip())


@functools.cache
def _no_guard(base_url: str | None) -> str:
    """Why no guard can be set for an engine at ``base_url`` ("" when one can)."""
    if base_url and not base_url.startswith("unix://"):
        return f"the engine at {base_url} is not on this host"
    if shutil.which("iptables") is None:
        return "no `iptables` on this host"
    done = subprocess.run(["iptables", "-w", "-S", "INPUT"], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        return f"`iptables -S INPUT` failed ({done.stderr.strip()}): run as root"
    return ""


@functools.cache
def _warn_once(message: str) -> None:
    logger.warning(message)
