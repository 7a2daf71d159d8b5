"""A driver that holds environments with live MCP servers and never cleans up: the test kills it.

    python tests/leaky_driver.py BACKEND ROOT RUN_ID WATCHDOG(0|1)

Acquires two environments from an ``EnvPool`` on the backend (``ROOT``: the local/bwrap root),
opens the edge test server in each through the gateway, prints ``ready`` and sleeps until killed.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import anyio  # noqa: E402

from actors.env_pool import EnvPool  # noqa: E402
from actors.mcp_gateway import McpGateway  # noqa: E402
from specs.env import EnvConfig  # noqa: E402
from specs.task import TaskSpec  # noqa: E402
from tests.backends import edge_server, make_backend  # noqa: E402


async def main(backend: str, root: str, run_id: str, watchdog: bool) -> None:
    provisioner = make_backend(backend, Path(root))
    pool = EnvPool(provisioner, run_id, max_live=2, watchdog=watchdog)
    edge = edge_server()
    task = TaskSpec(instance_id="leaky", instruction="x")
    envs = [await pool.acquire(EnvConfig(servers=(edge,)), task) for _ in range(2)]
    async with McpGateway.running(provisioner_for=lambda _: provisioner) as gateway:
        for env in envs:
            await gateway.open(env, [edge])
        print("ready", flush=True)
        await anyio.sleep_forever()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1")
