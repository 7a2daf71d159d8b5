"""Servers that listen (streamable HTTP) run inside their environment and are reached over HTTP.

The server is third-party and HTTP-only here: ``mcp-server-motherduck`` (DuckDB, from PyPI,
unchanged, in its own venv), whose registry entry (``tests/servers/thirdparty/servers.json``) has
a ``streamable_http`` command and no ``stdio`` one. On ``local`` it listens on a port of this host's
loopback; on ``docker`` inside the container, on the container's own internal network, which this
host reaches and which has no route out, guarded so that the container cannot open connections to
this host either. ``bwrap`` refuses it (a sandbox's network is its own) and says what to do.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import anyio
import pytest

from actors.errors import GatewayError
from actors.mcp_gateway import McpGateway
from actors.provisioners.base import Provisioner
from specs.env import EnvConfig, EnvHandle, EnvInfo, ServerLaunch
from specs.servers import load_server_registry
from tests.backends import REPO, cmdlines, environment, gone, make_backend, marked, run_id, unavailable

pytestmark = pytest.mark.anyio
THIRDPARTY = REPO / "tests" / "servers" / "thirdparty" / "servers.json"
TEST_TIMEOUT_S = 120.0
CALL_TIMEOUT_S = 30.0


@pytest.fixture
def duckdb(monkeypatch: pytest.MonkeyPatch) -> ServerLaunch:
    monkeypatch.chdir(REPO)  # the registry names the server's venv relative to the project root
    if not (REPO / ".cache" / "servers" / "motherduck" / ".requirements.json").exists():
        unavailable("the motherduck server's venv is missing: run `make servers`")
    return load_server_registry(THIRDPARTY).launch("motherduck")


@pytest.fixture(params=("local", "docker"))
def provisioner(request: pytest.FixtureRequest, tmp_path: Path) -> Provisioner:
    return make_backend(str(request.param), tmp_path / "envs")


async def query(gateway: McpGateway, env_id: str, sql: str) -> dict[str, object]:
    result = await gateway.call(env_id, "motherduck__execute_query", {"sql": sql}, CALL_TIMEOUT_S)
    assert not result.is_error, result.text
    answer: dict[str, object] = json.loads(result.text)
    return answer


async def test_an_http_only_server_runs_in_its_environment_and_answers_over_streamable_http(
    provisioner: Provisioner, duckdb: ServerLaunch
) -> None:
    server = duckdb
    assert server.listens and server.url == "http://{{HOST}}:{{PORT}}/mcp"
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with environment(provisioner, EnvConfig(servers=(server,))) as env:
            async with McpGateway.running(provisioner_for=lambda _: provisioner) as gateway:
                tools = await gateway.open(env, [server])
                assert {"motherduck__execute_query", "motherduck__list_tables"} <= {t.name for t in tools}
                assert marked(env.env_id), "the listener runs in the environment, marked as its own"
                await query(
                    gateway, env.env_id, "CREATE TABLE items (name TEXT); INSERT INTO items VALUES ('pear')"
                )
                answer = await query(gateway, env.env_id, "SELECT name FROM items")
                assert answer["rows"] == [["pear"]], answer
                await gateway.close(env.env_id)
                assert await gone(env.env_id), cmdlines(marked(env.env_id))
            listing = await EnvHandle(env, provisioner).run(["ls"])
            assert "shop.duckdb" in listing.stdout.split(), listing  # in the env's workdir, not elsewhere
    assert await provisioner.list_owned(env.run_id) == []
    if provisioner.name == "docker":
        assert not _networks_of(env.env_id), "the container's network went with it"


async def test_a_container_whose_server_listens_has_no_route_out_and_cannot_reach_this_host(
    tmp_path: Path, duckdb: ServerLaunch
) -> None:
    provisioner = make_backend("docker", tmp_path / "envs")
    listening = await anyio.create_tcp_listener(local_host="0.0.0.0")  # every address of this host
    port = listening.extra(anyio.abc.SocketAttribute.local_port)
    async with listening, environment(provisioner, EnvConfig(servers=(duckdb,))) as env:
        (network,) = _networks_of(env.env_id)
        gateway_ip = network.attrs["IPAM"]["Config"][0]["Gateway"]  # this host, on the env's bridge
        probe = (
            "import socket, sys\n"
            "routes = [l.split()[1] for l in open('/proc/net/route').read().splitlines()[1:]]\n"
            "print('default route' if '00000000' in routes else 'no default route')\n"
            "s = socket.socket(); s.settimeout(5)\n"
            "try:\n    s.connect((sys.argv[1], int(sys.argv[2]))); print('connected')\n"
            "except OSError as e:\n    print('refused' if isinstance(e, ConnectionRefusedError) else repr(e))\n"
        )
        with anyio.fail_after(TEST_TIMEOUT_S):
            done = await EnvHandle(env, provisioner).run([sys.executable, "-c", probe, gateway_ip, str(port)])
        assert done.stdout.split("\n")[:2] == ["no default route", "refused"], (done.stdout, done.stderr)


async def test_bwrap_refuses_a_listening_server_and_says_what_to_do(
    tmp_path: Path, duckdb: ServerLaunch
) -> None:
    provisioner = make_backend("bwrap", tmp_path / "envs")
    async with environment(provisioner, EnvConfig(servers=(duckdb,))) as env:
        async with McpGateway.running(provisioner_for=lambda _: provisioner) as gateway:
            with pytest.raises(
                GatewayError, match="no network that this host reaches; give it a 'stdio' entry"
            ):
                await gateway.open(env, [duckdb])
        assert marked(env.env_id) == []


def _networks_of(env_id: str) -> list[object]:
    import docker

    from actors.provisioners.docker import LABEL_ENV

    return list(docker.from_env().networks.list(filters={"label": f"{LABEL_ENV}={env_id}"}))


async def test_a_network_left_by_a_failed_create_is_found_by_the_reaper_and_removed_with_its_guard(
    tmp_path: Path,
) -> None:
    from actors.provisioners import docker_network
    from actors.provisioners.docker import DockerProvisioner

    provisioner = make_backend("docker", tmp_path / "envs")
    assert isinstance(provisioner, DockerProvisioner)
    env_id = uuid.uuid4().hex[:12]
    left = EnvInfo(
        env_id=env_id,
        run_id=run_id(),
        backend="docker",
        key="k",
        workdir="/workspace",
        created_at=0.0,
        data={
            "container": f"mcprl-{env_id}",
            "network": f"mcprl-{env_id}",
            "docker_url": provisioner.base_url,
        },
    )
    # what a create leaves when it dies between making the network and starting the container
    await anyio.to_thread.run_sync(
        docker_network.create, provisioner.base_url, f"mcprl-{env_id}", provisioner.labels(left)
    )
    assert docker_network.GUARD_COMMENT in _input_rules()
    assert [e.env_id for e in await provisioner.list_owned(left.run_id)] == [env_id]
    await provisioner.destroy(left)
    assert not _networks_of(env_id) and await provisioner.list_owned(left.run_id) == []
    assert docker_network.GUARD_COMMENT not in _input_rules()


def _input_rules() -> str:
    return subprocess.run(
        ["iptables", "-w", "-S", "INPUT"], capture_output=True, text=True, check=True
    ).stdout
