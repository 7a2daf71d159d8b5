"""The ``env`` section of a run config: the environment pool, its backend, its limits, its nodes."""

from __future__ import annotations

from typing import Literal

import msgspec

Backend = Literal["local", "bwrap", "docker"]


class EnvNodeGroup(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What differs on the env nodes that have one more Ray resource (``env.node_groups``)."""

    backend: Backend | None = None
    """Their provisioner backend (``null``: ``env.backend``)."""
    docker_url: str | None = None
    """Their Docker API endpoint, with ``backend: docker`` (``null``: ``env.docker_url`` where the
    run's backend is docker too, else ``$DOCKER_HOST``)."""
    max_live: int | None = None
    """Most environments alive at once on each of them (``null``: ``env.max_live``)."""


class EnvPoolConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    backend: Backend = "local"
    """Provisioner backend: ``local`` (subprocesses in a temp dir, no isolation, development only),
    ``bwrap`` (daemonless bubblewrap sandbox: own mount/pid/net namespaces, no egress, limits by a
    cgroup per environment or rlimits) or ``docker`` (a confined container per environment through
    the Docker Engine API, with Docker or Podman's service; limits enforced)."""
    docker_url: str | None = None
    """Docker API endpoint for the docker backend, e.g. ``unix:///run/mcprl/podman.sock``
    (default: ``$DOCKER_HOST``, else the engine's default socket)."""
    max_live: int = 16
    """Most environments alive at once on each environment node; bounds host memory and processes."""
    node_resource: str | None = None
    """The Ray resource that marks the nodes hosting environments: each alive node with it gets an
    agent of its own (pool, gateway, evaluator), and new environments are placed over them by load
    (``actors/env_front.py``); start such nodes with ``ray start --resources '{"<name>": 1}'``.
    ``null``: the driver's node only."""
    node_groups: dict[str, EnvNodeGroup] = msgspec.field(default_factory=dict)
    """A mixed fleet: Ray resource -> the ``backend``, ``docker_url`` and ``max_live`` of the env
    nodes that have that resource too (the first group a node has wins; the rest of ``env`` is every
    node's). ``{mcprl_docker: {backend: docker, max_live: 32}}`` runs containers on the nodes started
    with ``--resources '{"mcprl_env": 1, "mcprl_docker": 1}'`` and ``env.backend`` on the others."""
    reuse: bool = True
    """Reset and reuse released environments instead of destroying them."""
    prewarm: int = 0
    """Environments created before the first step for each configuration that several tasks
    share (capped by ``max_live``); 0 creates on demand."""
    ttl_s: float | None = None
    """Destroy an environment this many seconds after its creation instead of reusing it; ``null``:
    no limit."""
    memory_mb: int | None = None
    """Memory limit per environment, no swap beyond it (docker, bwrap; ``null``: the backend's
    default, 2048). bwrap enforces its limits with a cgroup per environment where this process may
    make one (root, or a delegated cgroup v2), else with rlimits, per process (``RLIMIT_AS``) and
    with a warning; the local backend has none."""
    cpus: float | None = None
    """CPU limit per environment, in cores (docker, bwrap with a cgroup; ``null``: none)."""
    pids: int | None = None
    """Most processes per environment (docker, bwrap with a cgroup; ``null``: the backend's
    default, 512). A tool that forks past it gets an error from ``fork``; the observation of a
    server killed at a limit says which limit it hit."""
    network: bool = False
    """Let environments reach the network (docker only; bwrap and docker are offline by default)."""

    def __post_init__(self) -> None:
        if self.max_live < 1:
            raise ValueError("env.max_live must be >= 1: no rollout can run without an environment")
        if self.prewarm < 0:
            raise ValueError("env.prewarm must be >= 0")
        if self.ttl_s is not None and self.ttl_s <= 0:
            raise ValueError("env.ttl_s must be > 0 seconds, or null for no limit")
        for name in ("memory_mb", "cpus", "pids"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"env.{name} must be > 0, or null for the backend's default")
        if self.docker_url is not None and self.backend != "docker":
            raise ValueError(f"env.docker_url is set but env.backend is {self.backend!r}, not 'docker'")
        if self.node_groups and self.node_resource is None:
            raise ValueError("env.node_groups needs env.node_resource: the groups are of env nodes")
        for resource, group in self.node_groups.items():
            if group.max_live is not None and group.max_live < 1:
                raise ValueError(f"env.node_groups.{resource}.max_live must be >= 1")
            if group.docker_url is not None and (group.backend or self.backend) != "docker":
                raise ValueError(
                    f"env.node_groups.{resource}.docker_url is set but its backend is not 'docker'"
                )

    def on_node(self, resources: dict[str, float]) -> EnvPoolConfig:
        """These settings as they hold on an env node with ``resources`` (its group's, if any)."""
        group = next((g for r, g in self.node_groups.items() if resources.get(r, 0) > 0), None)
        if group is None:
            return self
        backend = group.backend or self.backend
        inherited = self.docker_url if backend == "docker" else None
        return msgspec.structs.replace(
            self,
            backend=backend,
            docker_url=group.docker_url or inherited,
            max_live=group.max_live or self.max_live,
            node_groups={},
        )

    def backends(self) -> set[str]:
        """Every backend some env node runs."""
        return {self.backend, *(g.backend for g in self.node_groups.values() if g.backend)}

    def provisioner_options(self) -> dict[str, object]:
        """Keyword arguments of the backend's provisioner (``make_provisioner``)."""
        return {"base_url": self.docker_url} if self.backend == "docker" else {}
