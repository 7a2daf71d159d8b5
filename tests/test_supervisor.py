"""A dead generator is restarted and re-synced before it serves again; its turns are retried."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Sequence

import anyio
import pytest
from ray.exceptions import RayActorError

from actors.supervisor import GeneratorRestarted, GeneratorUnavailable, SupervisedGenerator
from policies.types import Generation, PromptImage, SamplingConfig

pytestmark = pytest.mark.anyio
SAMPLING = SamplingConfig(temperature=0.0)


class DyingGenerator:
    """The generator actor's interface as Ray shows it: after ``die()`` every call raises Ray's
    actor-death error until the restart completes (``polls`` calls later), which serves version 0."""

    def __init__(self) -> None:
        self.version, self.alive, self.polls = 0, True, 0
        self.updates: list[int] = []
        self.hold = anyio.Event()

    def die(self, polls: int = 3) -> None:
        self.alive, self.polls = False, polls
        self.hold.set()

    def _check(self) -> None:
        if self.alive:
            return
        self.polls -= 1
        if self.polls <= 0:
            self.alive, self.version = True, 0  # the restarted process loaded the base weights
        raise RayActorError()

    async def generate(
        self, prompt_ids: list[int], sampling: SamplingConfig, images: Sequence[PromptImage] = ()
    ) -> Generation:
        self._check()
        if prompt_ids == [0]:  # a long turn, in flight when the process dies
            await self.hold.wait()
            raise RayActorError()
        return Generation(token_ids=[1], logprobs=[0.0], version=self.version, finish_reason="stop")

    async def get_version(self) -> int:
        self._check()
        return self.version

    async def update_weights(self, version: int, path: str) -> None:
        self._check()
        self.version = version
        self.updates.append(version)


async def test_a_turn_in_flight_when_the_generator_dies_is_lost_and_the_restart_is_resynced() -> None:
    actor = DyingGenerator()
    actor.version = 5
    supervised = SupervisedGenerator(actor, lambda: (5, "/dev/shm/weights-v5"))
    errors: list[BaseException] = []

    async def long_turn() -> None:
        try:
            await supervised.generate([0], SAMPLING)
        except GeneratorRestarted as e:
            errors.append(e)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for _ in range(3):  # three episodes have a turn in flight
                tg.start_soon(long_turn)
            await anyio.wait_all_tasks_blocked()
            actor.die()
    assert len(errors) == 3 and "restarted, serving version 5" in str(errors[0])
    assert actor.updates == [5] and supervised.restarts == 1  # one re-sync for one death
    turn = await supervised.generate([1, 2], SAMPLING)
    assert turn.version == 5


async def test_calls_during_a_restart_wait_for_the_resync() -> None:
    actor = DyingGenerator()
    supervised = SupervisedGenerator(actor, lambda: (2, "w"))
    actor.die(polls=2)
    with pytest.raises(GeneratorRestarted):
        await supervised.generate([1], SAMPLING)
    assert await supervised.get_version() == 2
    assert (await supervised.generate([1], SAMPLING)).version == 2


async def test_before_any_update_a_restart_serves_the_base_weights() -> None:
    actor = DyingGenerator()
    supervised = SupervisedGenerator(actor, lambda: None)
    actor.die(polls=1)
    with pytest.raises(GeneratorRestarted, match="serving version 0"):
        await supervised.generate([1], SAMPLING)
    assert actor.updates == []


async def test_other_errors_pass_through_and_a_generator_that_stays_dead_is_reported() -> None:
    class Broken(DyingGenerator):
        async def generate(
            self, prompt_ids: list[int], sampling: SamplingConfig, images: Sequence[PromptImage] = ()
        ) -> Generation:
            raise ValueError("prompt too long")

    with pytest.raises(ValueError, match="prompt too long"):
        await SupervisedGenerator(Broken(), lambda: None).generate([1], SAMPLING)
    actor = DyingGenerator()
    actor.die(polls=10**9)
    supervised = SupervisedGenerator(actor, lambda: None, restart_timeout_s=1.0)
    with pytest.raises(GeneratorUnavailable, match="did not come back within 1 s"):
        await supervised.generate([1], SAMPLING)


class EchoGenerator:
    """A real Ray actor with the generator's methods, for Ray's own restart semantics. The turn for
    prompt ``[0]`` never ends (it is in flight until the process dies); ``wait_in_flight`` returns
    once it has started. Ray runs an async actor's methods on one asyncio loop, concurrently."""

    def __init__(self) -> None:
        self.version = 0
        self.in_flight = asyncio.Event()

    async def generate(
        self, prompt_ids: list[int], sampling: SamplingConfig, images: Sequence[PromptImage] = ()
    ) -> Generation:
        if prompt_ids == [0]:
            self.in_flight.set()
            await asyncio.Event().wait()
        return Generation(token_ids=[7], logprobs=[0.0], version=self.version, finish_reason="stop")

    async def get_version(self) -> int:
        return self.version

    async def update_weights(self, version: int, path: str) -> None:
        self.version = version

    async def wait_in_flight(self) -> None:
        await self.in_flight.wait()

    async def pid(self) -> int:
        return os.getpid()


async def test_a_killed_ray_generator_actor_is_restarted_by_ray_and_resynced() -> None:
    import ray

    from actors.remote import AsyncProxy, remote_class

    ray.init(
        num_cpus=1,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(sys.path)}},
    )
    try:
        handle = remote_class(EchoGenerator, max_restarts=1, max_task_retries=0).remote()
        proxy = AsyncProxy(handle)
        await proxy.update_weights(3, "w3")
        first = await proxy.pid()
        supervised = SupervisedGenerator(proxy, lambda: (3, "w3"), restart_timeout_s=120)
        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:

                async def in_flight() -> None:
                    with pytest.raises(GeneratorRestarted, match="serving version 3"):
                        await supervised.generate([0], SAMPLING)

                tg.start_soon(in_flight)
                await proxy.wait_in_flight()  # the turn has reached the actor
                ray.kill(handle, no_restart=False)  # the process dies; Ray starts another
            assert await proxy.pid() != first
            assert (await supervised.generate([1], SAMPLING)).version == 3
    finally:
        ray.shutdown()
