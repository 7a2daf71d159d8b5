"""One call of a pinned tool, and what each way it can fail means for the server and the environment.

``run_call`` runs one call of a pinned tool and turns every tool-level failure into an error kind
and an observation. Failure semantics (see the failure model in ARCHITECTURE.md):

- deadline: the request is abandoned, which sends MCP's ``notifications/cancelled``; if the server
  then answers a ping within ``cancel_grace_s`` it keeps running (its state intact). If it does not
  (work stuck in native code or a blocked event loop), its session is closed, which terminates its
  process tree (the SDK closes stdin, then SIGTERM/SIGKILL to the process group), and the next call
  to that server starts a fresh process, with that server's in-memory state lost. Either way the
  environment is marked broken (never reused: a half-done side effect may remain).
- server died (connection closed, or it stops answering pings after an unexpected error): the
  environment is marked broken and every further call to that server returns ``server_died``; the
  rollout ends the trajectory as failed-by-infrastructure.
- limits: when the environment hit its memory or process limit this episode
  (``Provisioner.limits_hit``), the observation of a death or a stopped server says so.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio
import msgspec

from actors.mcp_results import Parts, ResultCaps, result_parts
from actors.mcp_sessions import EnvState, ServerState, answers_ping
from actors.mcp_wire import CONNECTION_CLOSED, INVALID_PARAMS, argument_problem, describe, error_code
from policies.types import ToolSpec
from specs.env import ServerLaunch

logger = logging.getLogger(__name__)

PING_S = 2.0
"""An alive server answers a ping in milliseconds."""


def kill(state: EnvState, srv: ServerState, why: str) -> None:
    """Stop ``srv`` (its process tree ends with its session); the next call restarts it."""
    state.broken = state.broken or why
    if srv.status in ("starting", "up"):
        srv.status = "killed"
    srv.stop.set()


async def restart(
    state: EnvState, srv: ServerState, start: Callable[[EnvState, ServerLaunch], ServerState]
) -> ServerState:
    """The server to send to: one stopped by a deadline is replaced by a fresh process (``start``),
    once the old one is gone."""
    if srv.status != "killed":
        return srv
    async with state.restart_lock:
        current = state.servers[srv.name]
        if current.status == "killed":
            await current.done.wait()
            current.stderr.close()
            current = start(state, current.launch)
            await current.ready.wait()
            if current.status != "up":
                logger.warning("%s", current.describe_failure())
                current.status = "dead"
        return current


async def after_deadline(
    state: EnvState, srv: ServerState, name: str, timeout_s: float, grace_s: float
) -> str:
    """The observation of a call abandoned at its deadline; stops the server unless it answers a
    ping within ``grace_s``. Marks the environment broken either way."""
    state.broken = state.broken or f"{name} exceeded its {timeout_s:g}s deadline"
    limit = f"Tool {name} did not finish within its {timeout_s:g}s deadline"
    if srv.status == "up" and await answers_ping(srv, grace_s):
        return f"{limit}: the call was cancelled (server {srv.name!r} is still running)."
    kill(state, srv, state.broken)
    return (
        f"{limit}: the call was cancelled and server {srv.name!r} was stopped (it restarts on the "
        f"next call, with its state lost).{await limits_note(state)}"
    )


async def limits_note(state: EnvState) -> str:
    """`` The environment hit ...`` when it hit a resource limit this episode (the likely cause of a
    death or a stall), else ``""``."""
    try:
        hit = await state.provisioner.limits_hit(state.info)
    except Exception:  # a note is a courtesy: never let it hide the failure it explains
        logger.exception("env %s: its limit counters could not be read", state.info.env_id)
        return ""
    set_to = state.info.data.get("limits") or {}
    said = []
    if hit.get("memory"):
        cap = f" of {set_to['memory_mb']} MB" if set_to.get("memory_mb") else ""
        said.append(f"its memory limit{cap} ({hit['memory']} process(es) killed by the kernel)")
    if hit.get("pids"):
        cap = f" of {set_to['pids']}" if set_to.get("pids") else ""
        said.append(f"its process limit{cap} ({hit['pids']} process start(s) refused)")
    return f" The environment hit {' and '.join(said)}." if said else ""


async def classify_failure(state: EnvState, srv: ServerState, name: str, e: Exception) -> tuple[str, str]:
    """(observation, error kind) of a call that raised ``e``: ``timeout``, ``bad_arguments``,
    ``tool_error`` or ``server_died`` (then the environment is broken and the server stopped)."""
    code = error_code(e)
    if srv.status == "killed":
        return (
            f"Tool {name} was cancelled: server {srv.name!r} was stopped after another call's deadline.",
            "timeout",
        )
    if code not in (None, CONNECTION_CLOSED):  # a JSON-RPC error reply: the server is alive
        kind = "bad_arguments" if code == INVALID_PARAMS else "tool_error"
        return f"Tool {name} failed: MCP error {code}: {describe(e)}", kind
    if code is None and await answers_ping(srv, PING_S):
        return f"Tool {name} failed: {describe(e)}", "tool_error"
    state.broken = state.broken or f"server {srv.name} died during {name}"
    srv.status = "dead"
    srv.stop.set()
    logger.warning(
        "MCP server %r of env %s died during %s; stderr tail:\n%s",
        srv.name,
        srv.env_id,
        name,
        srv.stderr_tail(),
    )
    note = await limits_note(state)
    return f"MCP server {srv.name!r} died while running {name} ({describe(e)}).{note}", "server_died"


async def run_call(
    state: EnvState,
    spec: ToolSpec,
    arguments: dict[str, Any],
    timeout_s: float,
    caps: ResultCaps,
    cancel_grace_s: float,
    start: Callable[[EnvState, ServerLaunch], ServerState],
) -> tuple[Parts, str | None]:
    """Check and run one call of a pinned tool: its parts and error kind (``None``: success)."""
    name = spec.name
    if not isinstance(arguments, dict):
        why = f"Arguments of {name} must be a JSON object, got {type(arguments).__name__}."
        return Parts(text=why), "bad_arguments"
    problem = argument_problem(state.validators.get(name), arguments)
    if problem:
        return Parts(text=f"Invalid arguments for {name}: {problem}"), "bad_arguments"
    if state.budget_left_s is not None:
        if state.budget_left_s <= 0:
            why = f"Tool {name} was not run: the episode's tool time budget is spent."
            return Parts(text=why), "budget_exhausted"
        timeout_s = min(timeout_s, state.budget_left_s)
    srv = state.servers[spec.server]
    with anyio.move_on_after(timeout_s) as deadline:
        srv = await restart(state, srv, start)
        if srv.status == "dead" or srv.session is None:
            why = f"MCP server {srv.name!r} is not running (it died earlier); {name} cannot run."
            return Parts(text=why), "server_died"
        try:
            raw = await srv.session.call_tool(spec.tool, arguments)
        except Exception as e:  # the boundary: every failure becomes an observation
            text, kind = await classify_failure(state, srv, name, e)
            return Parts(text=text), kind
    if deadline.cancelled_caught:
        text = await after_deadline(state, srv, name, timeout_s, cancel_grace_s)
        return Parts(text=text), "timeout"
    wire = raw.model_dump(by_alias=True, mode="json", exclude_none=True)
    parts = result_parts(wire, caps, state.secrets)
    if parts.is_error:
        text = parts.text or f"Tool {name} reported an error without a message."
        return msgspec.structs.replace(parts, text=text), "tool_error"
    return parts, None
