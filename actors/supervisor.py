"""A generator that survives its own death: restarted, re-synced, its turns in flight retried.

The generator actor is created with Ray ``max_restarts``: when its process dies (out of memory, a
crashed engine, a killed node process) Ray starts a fresh one, which loads the *base* weights and
serves policy version 0. ``SupervisedGenerator`` is the ``GeneratorHandle`` (and so the
``policies.engine.Engine``) the rollout and the training loop use in front of it:

- a call that fails because the actor died raises ``GeneratorRestarted`` (an infrastructure failure:
  the rollout retries that episode on a fresh environment, ``actors/rollout.py``);
- before the generator serves again, the supervisor waits for the restarted actor and sends it the
  last published weights (``latest()``), so no episode is ever sampled by a policy the learner has
  moved past; calls that arrive meanwhile wait for the re-sync;
- one re-sync per death, however many calls saw it; ``restarts`` counts them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import anyio

from actors.generator import GeneratorHandle, GeneratorStats
from policies.types import Generation, PromptImage, SamplingConfig
from specs.errors import MCPRLError

logger = logging.getLogger(__name__)


class GeneratorRestarted(MCPRLError):
    """The generator died during a call; it was restarted and re-synced, the call was lost."""


class GeneratorUnavailable(MCPRLError):
    """The generator died and did not come back within the supervisor's deadline."""


def is_actor_death(error: BaseException) -> bool:
    """Whether ``error`` says the actor process is gone (Ray's actor-death errors)."""
    try:
        from ray.exceptions import ActorUnavailableError, RayActorError
    except ImportError:  # without Ray there is no actor to die
        return False
    return isinstance(error, RayActorError | ActorUnavailableError)


class SupervisedGenerator:
    """A ``GeneratorHandle`` over a restartable generator ``proxy`` (an ``AsyncProxy`` of the actor).
    ``latest()`` gives the last published ``(version, path)``, or ``None`` while the base weights
    are current."""

    def __init__(
        self,
        proxy: GeneratorHandle,
        latest: Callable[[], tuple[int, str] | None],
        *,
        restart_timeout_s: float = 900.0,
        is_death: Callable[[BaseException], bool] = is_actor_death,
    ) -> None:
        self._proxy, self._latest, self._is_death = proxy, latest, is_death
        self._timeout_s = restart_timeout_s
        self._lock = anyio.Lock()
        self._deaths = 0  # deaths seen; a re-sync serves every call that saw the same one
        self._synced = 0
        self.restarts = 0

    async def generate(
        self, prompt_ids: list[int], sampling: SamplingConfig, images: Sequence[PromptImage] = ()
    ) -> Generation:
        """One turn; raises ``GeneratorRestarted`` when the generator died during it (module docstring)."""
        await self._wait_synced()
        seen = self._deaths
        try:
            return await self._proxy.generate(prompt_ids, sampling, images)
        except Exception as e:
            if not self._is_death(e):
                raise
            if self._deaths == seen:
                self._deaths += 1
            version = await self._resync()
            raise GeneratorRestarted(
                f"the generator died during a turn ({type(e).__name__}); restarted, serving version {version}"
            ) from e

    async def update_weights(self, version: int, path: str) -> None:
        """Serve policy ``version`` from the learner export at ``path`` (after any pending re-sync)."""
        await self._wait_synced()
        await self._proxy.update_weights(version, path)

    async def get_version(self) -> int:
        """The policy version served (after any pending re-sync)."""
        await self._wait_synced()
        return await self._proxy.get_version()

    async def sleep(self) -> None:
        """Hand the device to the learner (``VllmEngine.sleep``), after any pending re-sync."""
        await self._wait_synced()
        await self._proxy.sleep()

    async def wake_up(self) -> None:
        """Undo ``sleep``."""
        await self._proxy.wake_up()

    async def stats(self) -> GeneratorStats:
        """The generator's counters since its (last) start."""
        return await self._proxy.stats()

    async def shutdown(self) -> None:
        """Stop the engine."""
        await self._proxy.shutdown()

    async def _wait_synced(self) -> None:
        if self._synced < self._deaths:
            await self._resync()

    async def _resync(self) -> int:
        """Wait for the restarted actor, give it the latest weights; once per death."""
        async with self._lock:
            target = self._deaths
            if self._synced >= target:
                return await self._proxy.get_version()
            served: int | None = None
            with anyio.move_on_after(self._timeout_s):
                while served is None:
                    try:
                        served = await self._proxy.get_version()
                    except Exception as e:
                        if not self._is_death(e):
                            raise
                        await anyio.sleep(0.5)  # Ray is restarting the actor: poll, bounded
            if served is None:
                raise GeneratorUnavailable(f"the generator did not come back within {self._timeout_s:g} s")
            latest = self._latest()
            if latest is not None and served != latest[0]:
                await self._proxy.update_weights(*latest)
                served = latest[0]
            self._synced = target
            self.restarts += 1
            logger.warning("generator restarted and re-synced to policy version %d", served)
            return served
