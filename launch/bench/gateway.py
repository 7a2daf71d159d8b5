"""Benchmark: a tool call through ``McpGateway`` against the same call through a bare MCP client.

    python -m launch.bench.gateway [--quick] [--calls 500] [--envs 8] [--profile]

The server is the edge test server's ``echo`` tool (``tests/servers/edge_server.py``: returns its
argument, so the time is the MCP round trip, not the tool). Every server runs in an environment of
the local backend, started the same way (``LocalProvisioner.stdio_launch``: same command, working
directory and environment), and both arms call ``echo("ping")``:

- ``bare``: ``mcp.ClientSession`` over ``mcp.stdio_client``, ``session.call_tool`` and a look at
  the result's first text part (what any MCP client pays);
- ``gateway``: ``McpGateway.call`` on an opened environment: that, plus what the gateway adds per
  call (the argument check against the tool's schema, the deadline, reading the result's wire
  form, turning it into an observation).

Sequential: after ``--warmup`` untimed calls per arm, ``--calls`` timed calls per arm, the two arms
alternating call by call (both see the same noise on a busy machine): p50 and p99 latency, calls/s
(calls / the arm's summed latency) and this process's CPU time per call (the client side's cost;
the server is another process). Concurrent: ``--envs`` environments through one gateway, each
calling ``--calls // --envs`` times in a row, all at once, against as many bare sessions doing the
same, in two halves run bare, gateway, gateway, bare: calls/s over the wall time. Every answer is
checked (``ping`` back, no error): failing calls are not a benchmark.

Prints an aligned table and ends with one line:
``gateway: p50_ratio=X p99_ratio=Y calls_per_s=Z`` (ratios gateway / bare of the sequential p50 and
p99; Z: the gateway's sequential calls/s). ``--profile`` also runs each arm's sequential calls
under cProfile and prints where the client's time goes per call, by package. ``--quick`` (60 calls,
2 envs) is what the test suite runs. Every environment (and so every server process) is destroyed
on the way out, also on an error or Ctrl-C.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO, cast

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client

from actors.mcp_gateway import McpGateway
from actors.provisioners.local import LocalProvisioner
from launch.bench.env_pool import percentile
from specs.env import EnvConfig, EnvInfo, ServerLaunch

EDGE_SERVER = Path(__file__).resolve().parents[2] / "tests" / "servers" / "edge_server.py"
SERVER = ServerLaunch(name="edge", command=sys.executable, args=(str(EDGE_SERVER),))
TOOL, ARGUMENTS, ANSWER = "echo", {"text": "ping"}, "ping"
CALL_TIMEOUT_S = 30.0
CLEANUP_TIMEOUT_S = 60.0
# --profile: where a call's client-side time goes, by the file its functions live in (first match)
PROFILE_BUCKETS = (
    ("argument check (jsonschema)", "/jsonschema/"),
    ("pydantic", "/pydantic"),
    ("gateway code (actors/)", "/actors/"),
    ("mcp SDK", "/mcp/"),
    ("anyio", "/anyio/"),
    ("asyncio event loop", "/asyncio/"),
    ("json", "/json/"),
    ("waiting for the server (epoll)", "'poll' of 'select.epoll'"),
    ("pipe write/read syscalls", "posix.write"),
    ("pipe write/read syscalls", "posix.read"),
)

Call = Callable[[], Awaitable[None]]


@dataclass
class Arm:
    name: str
    ms: list[float] = field(default_factory=list)
    cpu_s: float = 0.0
    """This process's CPU time spent in the arm's calls."""
    wall_s: float | None = None
    """Wall time of a concurrent arm; sequential arms: the summed latency."""

    @property
    def calls_per_s(self) -> float:
        seconds = self.wall_s if self.wall_s is not None else sum(self.ms) / 1000
        return len(self.ms) / seconds if seconds > 0 else float("nan")

    @property
    def cpu_us_per_call(self) -> float:
        return self.cpu_s * 1e6 / len(self.ms) if self.ms else float("nan")


@dataclass
class Result:
    run_id: str
    sequential: tuple[Arm, Arm]  # bare, gateway
    concurrent: tuple[Arm, Arm]
    env_ids: list[str]
    profile: list[tuple[str, float, float]] | None = None
    """``--profile``: (bucket, bare µs/call, gateway µs/call)."""

    @property
    def summary(self) -> dict[str, float]:
        bare, gateway = self.sequential
        return {
            "p50_ratio": percentile(gateway.ms, 50) / percentile(bare.ms, 50),
            "p99_ratio": percentile(gateway.ms, 99) / percentile(bare.ms, 99),
            "calls_per_s": gateway.calls_per_s,
        }


def summary_line(summary: dict[str, float]) -> str:
    return (
        f"gateway: p50_ratio={summary['p50_ratio']:.2f} p99_ratio={summary['p99_ratio']:.2f} "
        f"calls_per_s={summary['calls_per_s']:.1f}"
    )


# -- the two clients ------------------------------------------------------------------------------


def gateway_call(gateway: McpGateway, env: EnvInfo) -> Call:
    name = f"{SERVER.name}__{TOOL}"

    async def call() -> None:
        result = await gateway.call(env.env_id, name, dict(ARGUMENTS), CALL_TIMEOUT_S)
        if result.is_error or result.text != ANSWER:
            raise RuntimeError(f"gateway call of {name} in env {env.env_id} answered {result!r}")

    return call


def bare_call(session: ClientSession) -> Call:
    async def call() -> None:
        with anyio.fail_after(CALL_TIMEOUT_S):
            result = await session.call_tool(TOOL, dict(ARGUMENTS))
        texts = [getattr(part, "text", None) for part in result.content]
        if result.is_error or texts != [ANSWER]:
            raise RuntimeError(f"bare call of {TOOL} answered {result!r}")

    return call


@asynccontextmanager
async def bare_session(provisioner: LocalProvisioner, env: EnvInfo, errlog: TextIO) -> AsyncIterator[Call]:
    """A plain MCP client session on the server, started exactly as the gateway starts it."""
    launch = provisioner.stdio_launch(env, SERVER)
    params = StdioServerParameters(
        command=launch.command, args=list(launch.args), env=dict(launch.env), cwd=launch.cwd
    )
    async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
        with anyio.fail_after(CALL_TIMEOUT_S):
            await session.initialize()
        yield bare_call(session)


# -- measuring ------------------------------------------------------------------------------------


async def timed(call: Call, into: Arm) -> None:
    cpu, start = time.process_time(), time.perf_counter()
    await call()
    into.ms.append((time.perf_counter() - start) * 1000)
    into.cpu_s += time.process_time() - cpu


async def sequential(bare: Call, gateway: Call, warmup: int, n: int) -> tuple[Arm, Arm]:
    """``warmup`` untimed then ``n`` timed calls per arm, the arms alternating call by call."""
    arms = (Arm("bare ClientSession"), Arm("McpGateway"))
    pairs = list(zip((bare, gateway), arms, strict=True))
    for _ in range(warmup):
        for call, _arm in pairs:
            await call()
    for i in range(n):
        for call, arm in pairs if i % 2 == 0 else pairs[::-1]:  # neither arm always goes first
            await timed(call, arm)
    return arms


async def burst(calls: Sequence[Call], per_caller: int, arm: Arm) -> None:
    """Every caller makes ``per_caller`` calls in a row, all callers at once."""

    async def caller(call: Call) -> None:
        for _ in range(per_caller):
            start = time.perf_counter()
            await call()
            arm.ms.append((time.perf_counter() - start) * 1000)

    cpu, start = time.process_time(), time.perf_counter()
    async with anyio.create_task_group() as tg:
        for call in calls:
            tg.start_soon(caller, call)
    arm.wall_s = (arm.wall_s or 0.0) + time.perf_counter() - start
    arm.cpu_s += time.process_time() - cpu


async def concurrent(bare: Sequence[Call], gateway: Sequence[Call], per_caller: int) -> tuple[Arm, Arm]:
    """Both arms, each in two halves, run bare, gateway, gateway, bare (after a warm-up call each)."""
    arms = (Arm(f"bare, {len(bare)} sessions at once"), Arm(f"McpGateway, {len(gateway)} envs at once"))
    for call in [*bare, *gateway]:
        await call()
    first, second = per_caller // 2, per_caller - per_caller // 2
    for calls, n, arm in ((bare, first, arms[0]), (gateway, first, arms[1])):
        await burst(calls, n, arm)
    for calls, n, arm in ((gateway, second, arms[1]), (bare, second, arms[0])):
        await burst(calls, n, arm)
    return arms


def profiled_buckets(profiler: cProfile.Profile, calls: int) -> dict[str, float]:
    """Own time (µs per call) of the profiled functions, summed per ``PROFILE_BUCKETS`` entry."""
    totals: dict[str, float] = {}
    raw: dict[tuple[str, int, str], tuple[Any, ...]] = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    for (file, _line, function), (_cc, _nc, own_s, *_rest) in raw.items():
        where = f"{file} {function}"
        bucket = next((name for name, key in PROFILE_BUCKETS if key in where), "other")
        totals[bucket] = totals.get(bucket, 0.0) + own_s * 1e6 / calls
    return totals


async def profile(bare: Call, gateway: Call, n: int) -> list[tuple[str, float, float]]:
    """``n`` calls per arm under cProfile, alternating as in ``sequential``: (bucket, bare µs/call,
    gateway µs/call). Everything this process runs during a call counts (the SDK's reader and
    writer tasks, the gateway's session task)."""
    pairs = [(bare, cProfile.Profile()), (gateway, cProfile.Profile())]
    for i in range(n):
        for call, profiler in pairs if i % 2 == 0 else pairs[::-1]:
            profiler.enable()
            try:
                await call()
            finally:
                profiler.disable()
    bare_us, gateway_us = (profiled_buckets(profiler, n) for _, profiler in pairs)
    names = [*dict.fromkeys([name for name, _ in PROFILE_BUCKETS] + ["other"])]
    return [(name, bare_us.get(name, 0.0), gateway_us.get(name, 0.0)) for name in names]


async def bench(args: argparse.Namespace, envs: list[EnvInfo], provisioner: LocalProvisioner) -> Result:
    async def new_env() -> EnvInfo:
        env = await provisioner.create(EnvConfig(servers=(SERVER,)), args.run_id)
        envs.append(env)
        return env

    async with AsyncExitStack() as stack:
        # the bare servers' stderr (their logging) goes to a file, as the gateway's servers' does
        errlog = cast(TextIO, stack.enter_context(tempfile.TemporaryFile()))
        gateway = await stack.enter_async_context(McpGateway.running(provisioner_for=lambda _: provisioner))

        async def gateway_env() -> Call:
            env = await new_env()
            await gateway.open(env, [SERVER])
            return gateway_call(gateway, env)

        async def bare_env() -> Call:
            return await stack.enter_async_context(bare_session(provisioner, await new_env(), errlog))

        bare, through_gateway = await bare_env(), await gateway_env()
        seq = await sequential(bare, through_gateway, args.warmup, args.calls)
        bare_calls = [await bare_env() for _ in range(args.envs)]
        gateway_calls = [await gateway_env() for _ in range(args.envs)]
        con = await concurrent(bare_calls, gateway_calls, max(2, args.calls // args.envs))
        profiled = await profile(bare, through_gateway, args.calls) if args.profile else None
    return Result(args.run_id, seq, con, [e.env_id for e in envs], profiled)


async def run(args: argparse.Namespace) -> Result:
    provisioner = LocalProvisioner(args.root)
    envs: list[EnvInfo] = []
    try:
        return await bench(args, envs, provisioner)
    except BaseExceptionGroup as group:  # the SDK's task groups wrap an error raised inside them
        raise leaf(group) from None
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLEANUP_TIMEOUT_S):
            for env in envs:
                await provisioner.destroy(env)
            for env in await provisioner.list_owned(args.run_id):  # one created but not recorded
                await provisioner.destroy(env)


def leaf(error: BaseException) -> BaseException:
    """The one exception inside nested single-member exception groups (else the group itself)."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


# -- reporting ------------------------------------------------------------------------------------


def table(result: Result) -> str:
    heads = ("calls", "p50 ms", "p99 ms", "calls/s", "cpu us/call")
    lines = [f"{'arm':34} {heads[0]:>6} {heads[1]:>8} {heads[2]:>8} {heads[3]:>9} {heads[4]:>12}"]

    def row(arm: Arm) -> str:
        p50, p99 = percentile(arm.ms, 50), percentile(arm.ms, 99)
        return (
            f"{arm.name:34} {len(arm.ms):6d} {p50:8.3f} {p99:8.3f} {arm.calls_per_s:9.1f} "
            f"{arm.cpu_us_per_call:12.1f}"
        )

    def ratio(bare: Arm, gateway: Arm) -> str:
        p50 = percentile(gateway.ms, 50) / percentile(bare.ms, 50)
        p99 = percentile(gateway.ms, 99) / percentile(bare.ms, 99)
        rate, cpu = gateway.calls_per_s / bare.calls_per_s, gateway.cpu_us_per_call / bare.cpu_us_per_call
        return f"{'  ratio gateway/bare':34} {'':6} {p50:8.2f} {p99:8.2f} {rate:9.2f} {cpu:12.2f}"

    lines.append("sequential (alternating call by call)")
    lines += [row(arm) for arm in result.sequential] + [ratio(*result.sequential)]
    lines.append("concurrent (calls/s over wall time)")
    lines += [row(arm) for arm in result.concurrent] + [ratio(*result.concurrent)]
    if result.profile:
        lines.append("")
        lines.append(f"{'profile: own time per call, us':34} {'bare':>8} {'gateway':>8} {'added':>8}")
        for name, bare, gateway in result.profile:
            lines.append(f"{name:34} {bare:8.1f} {gateway:8.1f} {gateway - bare:+8.1f}")
        total = [sum(values) for values in zip(*(p[1:] for p in result.profile), strict=True)]
        lines.append(
            f"{'total (cProfile inflates it)':34} {total[0]:8.1f} {total[1]:8.1f} {total[1] - total[0]:+8.1f}"
        )
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=500, help="timed calls per arm")
    parser.add_argument("--warmup", type=int, default=50, help="untimed calls per arm first")
    parser.add_argument("--envs", type=int, default=8, help="environments calling at once")
    parser.add_argument("--root", default=None, help="local backend root (default: its own)")
    parser.add_argument("--profile", action="store_true", help="also profile both sequential arms")
    parser.add_argument("--quick", action="store_true", help="60 calls, 2 envs (the test suite's run)")
    args = parser.parse_args(argv)
    if args.quick:
        args.calls, args.warmup, args.envs = 60, 10, 2
    if args.calls < 1 or args.warmup < 0 or args.envs < 1:
        parser.error("--calls and --envs must be >= 1, --warmup >= 0")
    args.run_id = f"bench-gateway-{uuid.uuid4().hex[:8]}"
    return args


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    print(
        f"run {args.run_id}: echo through McpGateway vs a bare mcp ClientSession, local backend, "
        f"{args.calls} calls per arm after {args.warmup} warm-up, {args.envs} envs concurrent",
        flush=True,
    )
    result = anyio.run(run, args)
    print(table(result))
    summary = result.summary
    print(summary_line(summary))
    return {"run_id": result.run_id, "env_ids": result.env_ids, **summary}


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # the environments are destroyed by then (shielded cleanup)
        sys.exit(130)
