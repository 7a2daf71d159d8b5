"""EnvPool: hands out environments for tasks, at most ``max_live`` at a time, reusing them after a reset.

``acquire(config, task)`` returns a prepared environment: an idle one with the same config key
(``EnvConfig.key()``) that passes its health check, else a new one from the provisioner; then the
task's ``prepares`` hooks run against it. When ``max_live`` environments exist (held or idle), it
first evicts an idle environment of another key, else waits (bounded by ``acquire_timeout_s``) for
a release. ``release(env, task, broken=...)`` runs the task's ``cleanups`` hooks, then resets the
environment and keeps it idle (``reuse`` and not broken, and the reset and cleanups succeeded) or
destroys it. ``shutdown()`` destroys everything the pool created. ``reap_leftovers()`` destroys
environments left behind by dead owners (earlier runs, crashed actors), found through the
provisioner's labels.

``prewarm(config, n)`` creates idle environments ahead of the first acquire, for configs that many
tasks share. With ``ttl_s``, an environment older than that is never handed out again: an expired
idle one is destroyed (at the next acquire or ``sweep()``), an expired held one at its release.
With ``watchdog=True`` a detached process (``actors/env_watchdog.py``) destroys the pool's
environments if this process dies without a shutdown (SIGKILL, a crash, a killed Ray actor).

Hooks are ``async def hook(env: EnvHandle, task: TaskSpec, **args)``, looked up with
``specs.registry.resolve`` in this process (import strings or names in the run's hook modules).
Cleanups bound to a tool (``CleanupSpec.tool``) need the trajectory's tool calls, which the pool
does not see: the pipeline works them out (``specs.cleanup_calls``) and passes the hooks among
them to ``release(tool_cleanups=...)``, which runs them, newest call first, before the others.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import anyio

from actors import env_watchdog
from actors.errors import EnvError
from actors.provisioners.base import Provisioner
from specs.cleanup_calls import CleanupCall
from specs.env import EnvConfig, EnvHandle, EnvInfo
from specs.registry import resolve
from specs.task import TaskSpec

logger = logging.getLogger(__name__)


class EnvPool:
    """Environment lifecycle over one provisioner; all methods are async and safe to call concurrently."""

    def __init__(
        self,
        provisioner: Provisioner,
        run_id: str,
        max_live: int,
        reuse: bool = True,
        *,
        hook_modules: Sequence[str] = (),
        acquire_timeout_s: float = 600.0,
        ttl_s: float | None = None,
        watchdog: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``clock`` (seconds) times each environment's age from its create, for ``ttl_s``; tests
        pass one they move forward."""
        if max_live < 1:
            raise ValueError(f"EnvPool max_live must be >= 1, got {max_live}")
        if ttl_s is not None and ttl_s <= 0:
            raise ValueError(f"EnvPool ttl_s must be > 0 (or None: no limit), got {ttl_s}")
        self.provisioner, self.run_id, self.max_live, self.reuse = provisioner, run_id, max_live, reuse
        self.hook_modules = tuple(hook_modules)
        self.acquire_timeout_s, self.ttl_s, self.watchdog = acquire_timeout_s, ttl_s, watchdog
        self._clock = clock
        self._born: dict[str, float] = {}  # env_id -> the clock at its create
        self._watchdog: env_watchdog.Watchdog | None = None
        self._watchdog_lock = anyio.Lock()
        self._held: dict[str, tuple[EnvInfo, tuple[str, ...]]] = {}
        self._idle: OrderedDict[str, EnvInfo] = OrderedDict()  # env_id -> env, oldest first
        self._live = 0  # held + idle + being created or destroyed: what max_live bounds
        self._changed = anyio.Condition()
        self._closed = False
        self._counts = {
            "created": 0,
            "reused": 0,
            "destroyed": 0,
            "reaped": 0,
            "expired": 0,
            "broken": 0,
            "hook_failures": 0,
        }

    async def acquire(
        self, config: EnvConfig, task: TaskSpec, hooks_modules: Sequence[str] | None = None
    ) -> EnvInfo:
        """A prepared environment for ``task``. Raises ``EnvError`` (create, prepare or wait failed)."""
        modules = tuple(hooks_modules) if hooks_modules is not None else self.hook_modules
        key = config.key()
        try:
            with anyio.fail_after(self.acquire_timeout_s):
                env = await self._take_or_create(config, key)
        except TimeoutError:
            raise EnvError(
                f"no environment for task {task.instance_id} within {self.acquire_timeout_s:g}s: "
                f"all {self.max_live} (max_live) are held"
            ) from None
        self._held[env.env_id] = (env, modules)
        try:
            for hook in task.prepares:
                fn = resolve("prepare", hook.prepare_func, modules, source=f"task {task.instance_id}")
                await fn(EnvHandle(env, self.provisioner), task, **hook.prepare_args)
        except BaseException as e:  # cancelled too: a half-prepared environment is never handed out
            self._counts["hook_failures"] += isinstance(e, Exception)
            del self._held[env.env_id]
            await self._destroy(env)
            if isinstance(e, Exception):
                raise EnvError(
                    f"prepare hook of task {task.instance_id} failed in env {env.env_id}: {e}"
                ) from e
            raise
        return env

    async def release(
        self,
        env: EnvInfo,
        task: TaskSpec,
        *,
        broken: bool = False,
        tool_cleanups: Sequence[CleanupCall] = (),
    ) -> None:
        """Run the cleanups (``tool_cleanups`` first: the hooks the episode's tool calls owe), then
        reset and keep the environment idle, or destroy it (broken, reuse off, a cleanup or the
        reset failed)."""
        entry = self._held.pop(env.env_id, None)
        if entry is None and self._closed:
            return  # shutdown already destroyed it; a late release from a finishing episode is fine
        if entry is None:
            raise EnvError(
                f"release of env {env.env_id} (task {task.instance_id}): it is not held by this pool"
            )
        # also when broken: they may undo outside state
        cleaned = await self._cleanup(env, task, entry[1], tool_cleanups)
        self._counts["broken"] += broken
        expired = self._expired(env)
        self._counts["expired"] += expired
        if self.reuse and cleaned and not broken and not expired and not self._closed:
            try:
                await self.provisioner.reset(env)
            except Exception:
                logger.exception("reset of env %s failed; destroying it", env.env_id)
            else:
                async with self._changed:
                    self._idle[env.env_id] = env
                    self._changed.notify_all()
                return
        await self._destroy(env)

    async def prewarm(self, config: EnvConfig, count: int) -> int:
        """Create up to ``count`` idle environments for ``config`` (fewer if ``max_live`` is
        reached), concurrently; how many were created. Failures are logged, not raised: an acquire
        creates on demand anyway."""
        created = 0

        async def one() -> None:
            nonlocal created
            async with self._changed:
                if self._closed or self._live >= self.max_live:
                    return
                self._live += 1
            try:
                env = await self._create(config)
            except EnvError as e:
                logger.warning("prewarm of an env for key %s failed: %s", config.key(), e)
                return
            with anyio.CancelScope(shield=True):  # idle at once: shutdown finds it even if cancelled now
                async with self._changed:
                    self._idle[env.env_id] = env
                    self._changed.notify_all()
            created += 1

        async with anyio.create_task_group() as tg:
            for _ in range(count):
                tg.start_soon(one)
        return created

    async def sweep(self) -> int:
        """Destroy idle environments past their time-to-live, then reap dead owners' leftovers;
        how many environments went."""
        expired = [env for env in self._idle.values() if self._expired(env)]
        for env in expired:
            self._idle.pop(env.env_id, None)
        self._counts["expired"] += len(expired)
        async with anyio.create_task_group() as tg:
            for env in expired:
                tg.start_soon(self._destroy, env)
        return len(expired) + await self.reap_leftovers()

    async def shutdown(self) -> None:
        """Destroy every environment this pool created (idle and held); later acquires fail."""
        self._closed = True
        doomed = list(self._idle.values()) + [env for env, _ in self._held.values()]
        self._idle.clear()
        self._held.clear()
        async with anyio.create_task_group() as tg:
            for env in doomed:
                tg.start_soon(self._destroy, env)
        if self._watchdog is not None:  # nothing left for it to guard
            await anyio.to_thread.run_sync(self._watchdog.stop)
            self._watchdog = None

    async def reap_leftovers(self) -> int:
        """Destroy environments whose owner process is gone and that this pool does not hold; how many."""
        mine = set(self._held) | set(self._idle)
        reaped = 0
        for env in await self.provisioner.list_owned(None):
            if env.env_id in mine or env_watchdog.owner_alive(env.data):
                continue
            try:
                await self.provisioner.destroy(env)
                reaped += 1
            except Exception:
                logger.exception("reaper could not destroy leftover env %s of run %s", env.env_id, env.run_id)
        self._counts["reaped"] += reaped
        if reaped:
            logger.info("reaped %d leftover environment(s)", reaped)
        return reaped

    def stats(self) -> dict[str, int]:
        """Counts for metrics: live, held, idle, created, reused, destroyed, reaped, expired, broken,
        hook_failures."""
        return {"live": self._live, "held": len(self._held), "idle": len(self._idle), **self._counts}

    async def _take_or_create(self, config: EnvConfig, key: str) -> EnvInfo:
        while True:
            async with self._changed:  # decide under the lock so that no release is missed
                while (step := self._next_step(key)) is None:
                    await self._changed.wait()
            action, env = step
            if env is None:
                return await self._create(config)
            if action == "evict":
                await self._destroy(env)
            elif await self._healthy(env):
                self._counts["reused"] += 1
                return env
            else:
                logger.warning("idle env %s failed its health check; destroying it", env.env_id)
                await self._destroy(env)

    async def _healthy(self, env: EnvInfo) -> bool:
        """Health check of an env taken from the idle set; an env whose check raises or is
        cancelled is destroyed (its slot freed), never left in limbo between idle and held."""
        try:
            return bool(await self.provisioner.health_check(env))
        except Exception:
            logger.exception("health check of env %s raised", env.env_id)
            return False
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._destroy(env)
            raise

    def _next_step(self, key: str) -> tuple[str, EnvInfo | None] | None:
        """What ``acquire`` does next (state is updated here, synchronously); ``None``: wait."""
        if self._closed:
            raise EnvError("EnvPool is shut down; no environments are handed out")
        stale = next((env for env in self._idle.values() if self._expired(env)), None)
        if stale is not None:
            self._counts["expired"] += 1
            return "evict", self._idle.pop(stale.env_id)
        match = next((env for env in self._idle.values() if env.key == key), None)
        if match is not None:
            return "reuse", self._idle.pop(match.env_id)
        if self._live < self.max_live:
            self._live += 1  # the slot is taken before the (slow) create starts
            return "create", None
        if self._idle:  # full, but an idle environment of another key can make room
            return "evict", self._idle.popitem(last=False)[1]
        return None

    def _expired(self, env: EnvInfo) -> bool:
        born = self._born.get(env.env_id)
        return self.ttl_s is not None and born is not None and self._clock() - born > self.ttl_s

    async def _create(self, config: EnvConfig) -> EnvInfo:
        """Create with a slot already counted in ``_live``; give the slot back if it fails."""
        try:
            if self.watchdog:
                await self._start_watchdog()
            env = await self.provisioner.create(config, self.run_id)
        except BaseException as e:
            await self._free_slot()
            if isinstance(e, Exception) and not isinstance(e, EnvError):
                raise EnvError(f"{self.provisioner.name} provisioner could not create an env: {e}") from e
            raise
        self._counts["created"] += 1
        self._born[env.env_id] = self._clock()
        return env

    async def _start_watchdog(self) -> None:
        async with self._watchdog_lock:  # one per pool, however many creates come at once
            if self._watchdog is None:
                spec = self.provisioner.spec()
                self._watchdog = await anyio.to_thread.run_sync(
                    env_watchdog.spawn, self.provisioner.name, spec, self.run_id
                )

    async def _destroy(self, env: EnvInfo) -> None:
        self._born.pop(env.env_id, None)
        try:
            with anyio.CancelScope(shield=True):
                await self.provisioner.destroy(env)
            self._counts["destroyed"] += 1
        except Exception:
            # The slot is freed anyway: a pool that leaks slots deadlocks; the reaper retries later.
            logger.exception("destroy of env %s failed", env.env_id)
        finally:
            await self._free_slot()

    async def _free_slot(self) -> None:
        with anyio.CancelScope(shield=True):
            async with self._changed:
                self._live -= 1
                self._changed.notify_all()

    async def _cleanup(
        self, env: EnvInfo, task: TaskSpec, modules: tuple[str, ...], tool_cleanups: Sequence[CleanupCall]
    ) -> bool:
        """Run the task's cleanup hooks; False if one failed (the environment is then not reused)."""
        owed = [(c.spec, c.arguments) for c in tool_cleanups]
        once = [(hook, hook.cleanup_args) for hook in task.cleanups if not hook.tool]
        for hook, raw_args in [*owed, *once]:
            try:
                fn = resolve("cleanup", hook.cleanup_func, modules, source=f"task {task.instance_id}")
                args: dict[str, Any] = raw_args if isinstance(raw_args, dict) else {}
                await fn(EnvHandle(env, self.provisioner), task, **args)
            except Exception:
                self._counts["hook_failures"] += 1
                logger.exception(
                    "cleanup hook %r of task %s failed in env %s",
                    hook.cleanup_func,
                    task.instance_id,
                    env.env_id,
                )
                return False
        return True


def remote_env_pool(
    provisioner: Provisioner,
    run_id: str,
    max_live: int,
    reuse: bool = True,
    *,
    ray_options: dict[str, Any] | None = None,
    **kwargs: Any,
) -> Any:
    """A Ray actor handle running ``EnvPool`` (an async actor; Ray imported only here)."""
    from actors.remote import remote_class

    return remote_class(EnvPool, **(ray_options or {})).remote(provisioner, run_id, max_live, reuse, **kwargs)
