"""EnvPool over the real local provisioner: lifecycle, reuse, the live cap, hooks, the reaper."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import anyio
import psutil
import pytest

from actors.env_pool import EnvPool
from actors.errors import EnvError
from actors.provisioners.local import LocalProvisioner
from specs.env import EnvConfig, EnvHandle, EnvInfo, ServerLaunch
from specs.registry import cleanup, prepare
from specs.task import CleanupSpec, PrepareSpec, TaskSpec
from tests.waiting import MovableClock

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parent.parent
HOOKS = "tests.test_env_pool"
CONFIG_A = EnvConfig(servers=(ServerLaunch(name="a", command="true"),))
CONFIG_B = EnvConfig(servers=(ServerLaunch(name="b", command="true"),))


# Hooks, referenced by import string ("tests.test_env_pool:seed") or by registered name.
@prepare("test.seed")
async def seed(env: EnvHandle, task: TaskSpec, *, path: str, text: str) -> None:
    await env.write_file(path, text)


@prepare("test.fail")
async def fail_to_prepare(env: EnvHandle, task: TaskSpec) -> None:
    raise RuntimeError(f"cannot prepare {task.instance_id}")


@cleanup("test.record")
async def record(env: EnvHandle, task: TaskSpec, *, log: str) -> None:
    """Append what the environment holds at cleanup time to a log outside it."""
    seen = sorted([p.name async for p in anyio.Path(env.workdir).iterdir()])
    async with await anyio.open_file(log, "a", encoding="utf-8") as f:
        await f.write(f"{task.instance_id} {env.info.env_id} {seen}\n")


@cleanup("test.explode")
async def explode(env: EnvHandle, task: TaskSpec) -> None:
    raise OSError("cleanup could not undo the change")


def make_task(
    name: str = "t1", prepares: tuple[PrepareSpec, ...] = (), cleanups: tuple[CleanupSpec, ...] = ()
) -> TaskSpec:
    return TaskSpec(instance_id=name, instruction="do it", prepares=prepares, cleanups=cleanups)


def make_pool(tmp_path: Path, max_live: int = 2, reuse: bool = True, **kwargs: object) -> EnvPool:
    return EnvPool(
        LocalProvisioner(tmp_path / "envs"), "run-1", max_live, reuse, hook_modules=(HOOKS,), **kwargs
    )


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


async def test_prepare_hooks_run_before_the_env_is_handed_out_and_cleanups_run_at_release(
    tmp_path: Path,
) -> None:
    log = tmp_path / "cleanup.log"
    task = make_task(
        prepares=(
            PrepareSpec(prepare_func=f"{HOOKS}:seed", prepare_args={"path": "data/in.txt", "text": "42"}),
            PrepareSpec(prepare_func="test.seed", prepare_args={"path": "b.txt", "text": "by name"}),
        ),
        cleanups=(CleanupSpec(cleanup_func="test.record", cleanup_args={"log": str(log)}),),
    )
    pool = make_pool(tmp_path)
    with anyio.fail_after(30):
        env = await pool.acquire(CONFIG_A, task)
        assert await anyio.Path(env.workdir, "data", "in.txt").read_text() == "42"
        assert await anyio.Path(env.workdir, "b.txt").read_text() == "by name"
        await pool.release(env, task)
        await pool.shutdown()
    assert log.read_text() == f"t1 {env.env_id} ['b.txt', 'data']\n"


async def test_a_released_env_is_reset_and_reused_for_the_same_config(tmp_path: Path) -> None:
    pool = make_pool(tmp_path)
    task = make_task()
    with anyio.fail_after(30):
        first = await pool.acquire(CONFIG_A, task)
        await anyio.Path(first.workdir, "leftover.txt").write_text("from the previous episode")
        await pool.release(first, task)
        second = await pool.acquire(CONFIG_A, task)
    assert second.env_id == first.env_id
    assert [p async for p in anyio.Path(second.workdir).iterdir()] == []
    stats = pool.stats()
    assert (stats["created"], stats["reused"], stats["live"], stats["held"]) == (1, 1, 1, 1)
    with anyio.fail_after(30):
        await pool.shutdown()


async def test_a_different_config_never_gets_another_configs_env(tmp_path: Path) -> None:
    pool = make_pool(tmp_path)
    task = make_task()
    with anyio.fail_after(30):
        a = await pool.acquire(CONFIG_A, task)
        await pool.release(a, task)
        b = await pool.acquire(CONFIG_B, task)
        assert b.env_id != a.env_id and b.key == CONFIG_B.key()
        await pool.shutdown()


async def test_a_broken_env_is_cleaned_up_then_destroyed_not_reused(tmp_path: Path) -> None:
    log = tmp_path / "cleanup.log"
    pool = make_pool(tmp_path)
    task = make_task(cleanups=(CleanupSpec(cleanup_func="test.record", cleanup_args={"log": str(log)}),))
    with anyio.fail_after(30):
        env = await pool.acquire(CONFIG_A, task)
        await pool.release(env, task, broken=True)
        again = await pool.acquire(CONFIG_A, task)
        await pool.shutdown()
        assert await anyio.Path(log).read_text() == f"t1 {env.env_id} []\n"
        assert not await anyio.Path(env.workdir).exists()
    assert again.env_id != env.env_id
    assert pool.stats()["destroyed"] == 2 and pool.stats()["broken"] == 1


async def test_without_reuse_every_release_destroys(tmp_path: Path) -> None:
    pool = make_pool(tmp_path, reuse=False)
    task = make_task()
    with anyio.fail_after(30):
        env = await pool.acquire(CONFIG_A, task)
        await pool.release(env, task)
    assert not await anyio.Path(env.workdir).exists()
    assert pool.stats()["live"] == 0


async def test_acquire_waits_while_max_live_envs_are_held_and_never_exceeds_it(tmp_path: Path) -> None:
    pool = make_pool(tmp_path, max_live=1)
    task = make_task()
    got: list[EnvInfo] = []

    async def second() -> None:
        got.append(await pool.acquire(CONFIG_B, task))

    with anyio.fail_after(30):
        first = await pool.acquire(CONFIG_A, task)
        async with anyio.create_task_group() as tg:
            tg.start_soon(second)
            await anyio.wait_all_tasks_blocked()
            assert got == [] and pool.stats()["live"] == 1
            await pool.release(first, task)  # idle now, of another key: evicted to make room
        assert pool.stats()["live"] == 1 and got[0].key == CONFIG_B.key()
        assert not await anyio.Path(first.workdir).exists()
        await pool.shutdown()


async def test_acquire_gives_up_with_env_error_when_no_env_frees_in_time(tmp_path: Path) -> None:
    pool = make_pool(tmp_path, max_live=1, acquire_timeout_s=0.2)
    task = make_task("waiting-task")
    with anyio.fail_after(30):
        await pool.acquire(CONFIG_A, task)
        with pytest.raises(EnvError, match="waiting-task.*max_live"):
            await pool.acquire(CONFIG_A, task)
        await pool.shutdown()


async def test_a_failing_prepare_hook_destroys_the_env_and_raises_env_error(tmp_path: Path) -> None:
    pool = make_pool(tmp_path)
    task = make_task("bad-prep", prepares=(PrepareSpec(prepare_func="test.fail"),))
    with anyio.fail_after(30), pytest.raises(EnvError, match="bad-prep.*cannot prepare"):
        await pool.acquire(CONFIG_A, task)
    stats = pool.stats()
    assert (stats["live"], stats["held"], stats["destroyed"], stats["hook_failures"]) == (0, 0, 1, 1)
    assert list((tmp_path / "envs").glob("*/*")) == []


async def test_a_failing_cleanup_hook_keeps_the_env_from_being_reused(tmp_path: Path) -> None:
    pool = make_pool(tmp_path)
    task = make_task(cleanups=(CleanupSpec(cleanup_func="test.explode"),))
    with anyio.fail_after(30):
        env = await pool.acquire(CONFIG_A, task)
        await pool.release(env, task)
    assert not await anyio.Path(env.workdir).exists()
    assert pool.stats()["idle"] == 0


async def test_releasing_an_env_twice_is_an_env_error(tmp_path: Path) -> None:
    pool = make_pool(tmp_path)
    task = make_task()
    with anyio.fail_after(30):
        env = await pool.acquire(CONFIG_A, task)
        await pool.release(env, task)
        with pytest.raises(EnvError, match=env.env_id):
            await pool.release(env, task)
        await pool.shutdown()


async def test_shutdown_destroys_held_and_idle_envs_and_refuses_new_acquires(tmp_path: Path) -> None:
    pool = make_pool(tmp_path, max_live=3)
    task = make_task()
    with anyio.fail_after(30):
        held = await pool.acquire(CONFIG_A, task)
        idle = await pool.acquire(CONFIG_B, task)
        await pool.release(idle, task)
        await pool.shutdown()
        with pytest.raises(EnvError, match="shut down"):
            await pool.acquire(CONFIG_A, task)
    assert not await anyio.Path(held.workdir).exists() and not await anyio.Path(idle.workdir).exists()
    assert list((tmp_path / "envs").iterdir()) == []


async def test_reset_kills_processes_left_running_in_the_env(tmp_path: Path) -> None:
    provisioner = LocalProvisioner(tmp_path / "envs")
    with anyio.fail_after(30):
        env = await provisioner.create(CONFIG_A, "run-1")
        started = await EnvHandle(env, provisioner).run(["sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"])
        pid = int(started.stdout)
        assert alive(pid)
        await provisioner.reset(env)
        assert not alive(pid)
        assert await provisioner.health_check(env)
        await provisioner.destroy(env)
        await provisioner.destroy(env)  # idempotent
        assert not await provisioner.health_check(env)


async def test_an_exec_deadline_kills_the_whole_process_group(tmp_path: Path) -> None:
    provisioner = LocalProvisioner(tmp_path / "envs")
    with anyio.fail_after(30):
        env = await provisioner.create(CONFIG_A, "run-1")
        result = await provisioner.exec(
            env, ["sh", "-c", "sleep 300 & echo $! > bg.pid; sleep 300"], timeout_s=0.5
        )
        assert result.returncode == 124 and "deadline" in result.stderr
        assert not alive(int(await anyio.Path(env.workdir, "bg.pid").read_text()))
        await provisioner.destroy(env)


async def test_the_reaper_destroys_leftovers_of_dead_owners_only(tmp_path: Path) -> None:
    root = tmp_path / "envs"
    # An earlier run that crashed: its owner process created an env and exited without destroying it.
    script = textwrap.dedent(f"""
        import anyio
        from specs.env import EnvConfig
        from actors.provisioners.local import LocalProvisioner
        print(anyio.run(LocalProvisioner({str(root)!r}).create, EnvConfig(), "old-run").workdir)
    """)
    with anyio.fail_after(60):
        done = await anyio.run_process([sys.executable, "-c", script], cwd=REPO, check=False)
    assert done.returncode == 0, done.stderr.decode()
    leftover = anyio.Path(done.stdout.decode().strip())
    assert await leftover.is_dir()
    provisioner = LocalProvisioner(root)
    with anyio.fail_after(30):
        other_live_run = await provisioner.create(
            CONFIG_A, "concurrent-run"
        )  # its owner (this process) lives
        pool = EnvPool(provisioner, "run-2", max_live=2)
        assert await pool.reap_leftovers() == 1
        assert not await leftover.exists()
        assert await anyio.Path(other_live_run.workdir).is_dir()
        assert [e.env_id for e in await provisioner.list_owned()] == [other_live_run.env_id]
        await provisioner.destroy(other_live_run)


async def test_prewarm_creates_idle_envs_up_to_max_live_that_acquires_then_reuse(tmp_path: Path) -> None:
    pool = make_pool(tmp_path, max_live=3)
    assert await pool.prewarm(CONFIG_A, 5) == 3  # capped by max_live
    stats = pool.stats()
    assert (stats["idle"], stats["live"], stats["created"]) == (3, 3, 3)
    envs = [await pool.acquire(CONFIG_A, make_task()) for _ in range(3)]
    stats = pool.stats()
    assert (stats["reused"], stats["created"], stats["held"]) == (3, 3, 3)
    for env in envs:
        await pool.release(env, make_task())
    await pool.shutdown()


async def test_envs_past_their_ttl_are_never_handed_out_again(tmp_path: Path) -> None:
    clock = MovableClock()
    pool = make_pool(tmp_path, max_live=2, ttl_s=60, clock=clock)
    first = await pool.acquire(CONFIG_A, make_task())
    clock.advance(61)
    await pool.release(first, make_task())  # expired while held: destroyed at release
    assert pool.stats()["expired"] == 1 and pool.stats()["idle"] == 0
    second = await pool.acquire(CONFIG_A, make_task())
    assert second.env_id != first.env_id
    await pool.release(second, make_task())  # fresh: kept idle
    assert pool.stats()["idle"] == 1
    assert await pool.sweep() == 0  # not yet expired: kept
    clock.advance(61)
    assert await pool.sweep() == 1  # an expired idle one goes at the next sweep
    stats = pool.stats()
    assert (stats["idle"], stats["live"], stats["expired"]) == (0, 0, 2)
    assert await pool.provisioner.list_owned("run-1") == []
    await pool.shutdown()


async def test_an_idle_env_past_its_ttl_is_replaced_at_acquire(tmp_path: Path) -> None:
    clock = MovableClock()
    pool = make_pool(tmp_path, max_live=1, ttl_s=60, clock=clock)
    first = await pool.acquire(CONFIG_A, make_task())
    await pool.release(first, make_task())
    clock.advance(61)
    second = await pool.acquire(CONFIG_A, make_task())
    assert second.env_id != first.env_id and pool.stats()["expired"] == 1
    await pool.release(second, make_task())
    await pool.shutdown()


async def test_the_watchdog_of_a_shut_down_pool_is_stopped(tmp_path: Path) -> None:
    pool = make_pool(tmp_path, max_live=1, watchdog=True)
    env = await pool.acquire(CONFIG_A, make_task())
    watchdog = pool._watchdog
    assert watchdog is not None and watchdog.running()  # guarding from the first create on
    await pool.release(env, make_task())
    await pool.shutdown()
    assert not watchdog.running() and pool._watchdog is None


async def test_a_watchdog_that_cannot_start_fails_the_acquire_and_frees_its_slot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from actors import env_watchdog

    def cannot_start(*args: object) -> env_watchdog.Watchdog:
        raise RuntimeError("the env watchdog of run r did not start")

    monkeypatch.setattr(env_watchdog, "spawn", cannot_start)
    pool = make_pool(tmp_path, max_live=1, watchdog=True)
    with pytest.raises(EnvError, match="watchdog of run r did not start"):
        await pool.acquire(CONFIG_A, make_task())
    assert pool.stats()["live"] == 0 and pool._watchdog is None
    await pool.shutdown()
