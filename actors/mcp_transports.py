"""The transports to one MCP server, as the SDK's (read, write) streams: ``connect(launch, ...)``.

``stdio`` runs the launch's command (already wrapped by the provisioner to run inside the
environment); ``http`` without a command reaches a running streamable-HTTP server with the launch's
headers; a listener (``ServerLaunch.listens``: ``http`` or ``sse`` with a command, its address
already filled by the provisioner) is started the same way, waited for until its port accepts, and
reached over streamable HTTP or SSE, then stopped with its process group on the way out. Used by
``McpGateway``, which owns the session on top.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import IO, TYPE_CHECKING, TextIO, cast
from urllib.parse import urlsplit

import anyio
import anyio.abc
from mcp import StdioServerParameters, stdio_client
from mcp.client.sse import sse_client
from mcp.client.stdio import get_default_environment
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from actors.errors import GatewayError
from actors.provisioners.local import kill_group, wait_until_gone
from specs.env import ServerLaunch

if TYPE_CHECKING:  # mcp 2.x names the pair; 1.x yields the same two memory streams
    from mcp.client._transport import TransportStreams

STOP_GRACE_S = 5.0
"""How long a listener has to end after SIGTERM (a bridge into a container kills its exec's tree
then) before its process group is killed."""


@asynccontextmanager
async def connect(
    launch: ServerLaunch, errlog: IO[bytes], start_timeout_s: float
) -> AsyncIterator[TransportStreams]:
    """The transport streams to one server: stdio (a process in the environment), streamable
    HTTP (a running server, with its headers) or a listener (a process in the environment,
    reached over HTTP or SSE once it accepts connections). ``errlog`` takes the server's stderr."""
    if launch.listens:
        async with _listener(launch, errlog, start_timeout_s) as streams:
            yield streams
        return
    if launch.transport == "http":
        async with _streamable_http(launch) as streams:
            yield streams
        return
    params = StdioServerParameters(
        command=launch.command, args=list(launch.args), env=dict(launch.env), cwd=launch.cwd
    )
    async with stdio_client(params, errlog=cast(TextIO, errlog)) as (read, write):
        yield read, write


@asynccontextmanager
async def _streamable_http(launch: ServerLaunch) -> AsyncIterator[TransportStreams]:
    assert launch.url is not None
    async with (
        create_mcp_http_client(headers=dict(launch.headers)) as client,
        streamable_http_client(launch.url, http_client=client) as (read, write),
    ):
        yield read, write


@asynccontextmanager
async def _listener(
    launch: ServerLaunch, errlog: IO[bytes], start_timeout_s: float
) -> AsyncIterator[TransportStreams]:
    assert launch.url is not None
    process = await anyio.open_process(
        [launch.command, *launch.args],
        cwd=launch.cwd,
        env=get_default_environment() | dict(launch.env),
        stdin=subprocess.DEVNULL,
        stdout=errlog,
        stderr=errlog,
        start_new_session=True,
    )
    try:
        await _wait_listening(launch, process, start_timeout_s)
        if launch.transport == "sse":
            async with sse_client(launch.url) as (read, write):
                yield read, write
        else:
            async with _streamable_http(launch) as (read, write):
                yield read, write
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(_stop_group, process.pid)
            await process.aclose()


def _stop_group(pgid: int) -> None:
    """SIGTERM the listener's process group, then SIGKILL what is left after ``STOP_GRACE_S``."""
    import psutil

    try:
        leader = psutil.Process(pgid)
        os.killpg(pgid, signal.SIGTERM)
    except (psutil.Error, ProcessLookupError, PermissionError):
        pass
    else:
        wait_until_gone([leader], STOP_GRACE_S)
    kill_group(pgid)


async def _wait_listening(launch: ServerLaunch, process: anyio.abc.Process, timeout_s: float) -> None:
    """Until something accepts connections at the launch URL's address (bounded); fails if the
    listener's process exits first."""
    assert launch.url is not None
    where = urlsplit(launch.url)
    host, port = where.hostname or "127.0.0.1", where.port or 80
    with anyio.fail_after(timeout_s):
        while True:
            if process.returncode is not None:
                raise GatewayError(
                    f"MCP server {launch.name!r} exited with code {process.returncode} before it listened at {host}:{port}"
                )
            try:
                stream = await anyio.connect_tcp(host, port)
            except OSError:
                await anyio.sleep(0.05)
                continue
            await stream.aclose()
            return
