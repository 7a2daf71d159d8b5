"""Errors of the environment layer (EnvPool, provisioners, McpGateway).

Three kinds, by who must react:

- ``EnvError``: an environment could not be created, prepared, reset or handed out (a provisioner
  failure, a prepare hook that raised, the pool shut down or saturated past its wait bound).
- ``GatewayError``: the gateway was used wrongly (unknown environment id, a task asking for a tool
  its server does not have, opening an environment twice). A bug or a bad spec, not bad luck.
- ``InfraError``: an environment or MCP server died or never came up. The trajectory that needed it
  is failed-by-infrastructure; its environment is destroyed, never reused.

Tool-level problems (a tool that raises, bad arguments, a deadline) are not errors at all: the
gateway turns them into ``ToolResult`` observations the model reads.
"""

from __future__ import annotations

from specs.errors import MCPRLError


class EnvError(MCPRLError):
    """An environment could not be created, prepared, reset or handed out."""


class GatewayError(MCPRLError):
    """The gateway was asked for something that cannot exist (unknown env, unknown allowed tool)."""


class InfraError(MCPRLError):
    """An environment or MCP server died or failed to start: the trajectory failed by infrastructure."""

    cause = "infra_failed"
    """What the rollout counts the lost trajectory under (``lost_<cause>``): a class attribute,
    one per subclass, so that the metric names stay few; read it with ``loss_cause``."""


def loss_cause(error: BaseException) -> str:
    """The cause a trajectory lost to ``error`` is counted under: its ``InfraError`` class's
    ``cause``, else ``infra_failed``. Read off the class: an ``InfraError`` raised in a Ray actor
    arrives as a ``RayTaskError`` subclass of it whose instance attribute ``cause`` is the original
    exception, whose message (with an environment id) would become a metric name of its own."""
    return type(error).cause if isinstance(error, InfraError) else InfraError.cause
