"""A driver that holds environments with live MCP servers and never cleans up: the test kills it.

    python tests/leaky_driver.py BACKEND ROOT RUN_ID WATCHDOG(0|1) [ray]

Acquires two environments from an ``EnvPool`` on the backend (``ROOT``: the local/bwrap root),
opens the edge test server in each through the gateway, prints ``ready`` and sleeps until killed.
With ``ray`` the pool is a Ray actor in a local Ray cluster that this driver starts (as the
training driver's is), and the driver only waits.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import anyio  # noqa: E402

from actors.env_pool import EnvPool, remote_env_pool  # noqa: E402
from actors.mcp_gateway import McpGateway  # noqa: E402
from specs.env import EnvConfig  # noqa: E402
from specs.task import TaskSpec  # noqa: E402
from tests.backends import edge_server, make_backend  # noqa: E402

TASK = TaskSpec(instance_id="leaky", instruction="x")


async def main(backend: str, root: str, run_id: str, watchdog: bool) -> None:
    provisioner = make_backend(backend, Path(root))
    pool = EnvPool(provisioner, run_id, max_live=2, watchdog=watchdog)
    edge = edge_server()
    envs = [await pool.acquire(EnvConfig(servers=(edge,)), TASK) for _ in range(2)]
    async with McpGateway.running(provisioner_for=lambda _: provisioner) as gateway:
        for env in envs:
            await gateway.open(env, [edge])
        print("ready", flush=True)
        await anyio.sleep_forever()


def main_on_ray(backend: str, root: str, run_id: str, watchdog: bool) -> None:
    import time

    import ray

    ray.init(num_cpus=1, include_dashboard=False, runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}})
    pool = remote_env_pool(make_backend(backend, Path(root)), run_id, 2, watchdog=watchdog)
    config = EnvConfig(servers=(edge_server(),))
    ray.get([pool.acquire.remote(config, TASK) for _ in range(2)], timeout=120)
    print("ready", flush=True)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    args = (sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1")
    if sys.argv[5:] == ["ray"]:
        main_on_ray(*args)
    else:
        anyio.run(main, *args)
