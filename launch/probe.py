"""Start one MCP server the way an episode does, and show what the model would see.

    python launch/probe.py --servers specs/domains/calculator/servers.json --server calculator
    python launch/probe.py --servers FILE --server NAME --call calculate --args '{"expression": "2*21"}'
    python launch/probe.py --backend bwrap --servers FILE --server NAME    # sandboxed, as in training

The server is looked up in a server registry (MCP-Universe ``server_list.json`` shape; templates
filled from the environment), started inside a fresh environment of the chosen provisioner backend
(``--backend``: ``local``, the default, a temp dir with NO isolation; ``bwrap``, a bubblewrap
sandbox; ``docker``, a container on the Docker-API engine at ``--docker-url``, default
``$DOCKER_HOST``) through ``McpGateway``, so a server can be checked to work sandboxed before a run
trains on it. Its tools are printed as one JSON object on stdout:
``{"server", "backend", "env_id", "tools": [{name, tool, description, input_schema, annotations}],
"call"?}``. With ``--call`` (the bare or the namespaced tool name) it calls that tool once and adds
the structured ``ToolResult``, bounded as in training by the gateway's default caps (text,
structured content, images: ``actors/mcp_results.py``); what was cut is marked in the text and
listed in its ``cuts``. The environment is destroyed on exit.

Exit status: 0 done; 1 the environment could not be created or the server did not start (why, with
its stderr, on stderr); 2 a bad command line or registry; 3 the call returned an error result.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import uuid
from collections.abc import Sequence
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import anyio  # noqa: E402
import msgspec  # noqa: E402

from actors.errors import EnvError, InfraError  # noqa: E402
from actors.mcp_gateway import McpGateway  # noqa: E402
from actors.provisioners.base import Provisioner, make_provisioner  # noqa: E402
from specs.env import EnvConfig, ServerLaunch  # noqa: E402
from specs.errors import SpecError  # noqa: E402
from specs.servers import load_server_registry  # noqa: E402


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--servers", required=True, help="server registry file (server_list.json shape)")
    parser.add_argument("--server", required=True, help="name of the server in the registry")
    parser.add_argument(
        "--backend",
        choices=("local", "bwrap", "docker"),
        default="local",
        help="provisioner backend the server runs in (default: local, no isolation)",
    )
    parser.add_argument("--docker-url", help="Docker API URL for --backend docker (default: $DOCKER_HOST)")
    parser.add_argument("--call", metavar="TOOL", help="call this tool once (bare or <server>__<tool> name)")
    parser.add_argument("--args", default="{}", help="JSON object of arguments for --call (default: {})")
    parser.add_argument("--timeout", type=float, default=30.0, help="deadline of the call in seconds")
    parser.add_argument(
        "--start-timeout", type=float, default=60.0, help="seconds the server may take to start"
    )
    args = parser.parse_args(argv)
    try:
        args.arguments = json.loads(args.args)
    except json.JSONDecodeError as e:
        parser.error(f"--args is not valid JSON: {e}")
    if not isinstance(args.arguments, dict):
        parser.error(f"--args must be a JSON object, got {type(args.arguments).__name__}")
    if args.docker_url and args.backend != "docker":
        parser.error("--docker-url needs --backend docker")
    return args


def make_backend(args: argparse.Namespace) -> Provisioner:
    options = {"base_url": args.docker_url} if args.backend == "docker" else {}
    return make_provisioner(args.backend, **options)


async def probe(launch: ServerLaunch, args: argparse.Namespace) -> tuple[int, dict[str, Any] | None]:
    """Start the server in a throwaway environment; (exit status, report)."""
    provisioner = make_backend(args)
    try:
        env = await provisioner.create(EnvConfig(servers=(launch,)), f"probe-{uuid.uuid4().hex[:8]}")
    except EnvError as e:
        print(f"probe: cannot create a {args.backend} environment: {e}", file=sys.stderr)
        return 1, None
    try:
        async with McpGateway.running(
            provisioner_for=lambda _: provisioner, start_timeout_s=args.start_timeout
        ) as gateway:
            try:
                tools = await gateway.open(env, [launch])
            except InfraError as e:
                print(f"probe: {e}", file=sys.stderr)
                return 1, None
            listing = (await gateway.server_tools(env.env_id))[launch.name]
            report: dict[str, Any] = {
                "server": launch.name,
                "backend": args.backend,
                "env_id": env.env_id,
                "tools": [
                    {
                        "name": f"{launch.name}__{t['name']}",
                        "tool": t["name"],
                        "description": t.get("description", ""),
                        "input_schema": t.get("inputSchema", {}),
                        "annotations": t.get("annotations", {}),
                    }
                    for t in listing
                ],
            }
            if args.call is None:
                return 0, report
            names = {t.name for t in tools}
            name = args.call if args.call in names else f"{launch.name}__{args.call}"
            result = await gateway.call(env.env_id, name, args.arguments, args.timeout)
            report["call"] = {
                "name": name,
                "arguments": args.arguments,
                "result": msgspec.to_builtins(result),
            }
            return (3 if result.is_error else 0), report
    finally:
        with anyio.CancelScope(shield=True):
            await provisioner.destroy(env)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        launch = load_server_registry(args.servers).launch(args.server)
    except SpecError as e:
        print(f"probe: {e}", file=sys.stderr)
        return 2
    status, report = anyio.run(probe, launch, args)
    if report is not None:
        print(json.dumps(report, indent=2, ensure_ascii=False))
    return status


if __name__ == "__main__":
    sys.exit(main())
