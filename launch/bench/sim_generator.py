"""A simulated Generator: the ``policies.engine.Engine`` seam over a continuous-batching latency model.

One engine loop advances every active sequence by one token per step, and a step with b
sequences decoding takes ``t(b) = t0 + t1*b`` seconds (``policies.throughput.step_time``). At most
``max_num_seqs`` sequences decode at once; later requests queue (FIFO) and join at a step boundary,
as in vLLM. A request of n tokens therefore finishes n steps after it joins.

The engine stands for a device that the orchestrator's CPU does not slow down: steps run on a
virtual clock, ``step_end = step_start + t(b)``, and the loop sleeps until that time. When the
event loop was busy and the loop wakes late, it processes every step that has ended by then in
order (a request that arrived after a step's start joins a later step), so a busy orchestrator
sees results late, as it would from a real engine, but never makes the engine itself slower.

What the tokens are is up to a ``script``: ``script(prompt_ids) -> token ids of the next turn``
(``LatencyToolScript`` writes real episodes against the latency server). The result is cut at
``sampling.max_tokens`` (finish ``length``); else it ends with the script's own last token
(finish ``stop``). Logprobs are 0.0: the script is deterministic. A caller cancelled while it
waits takes its request out of the batch, as vLLM aborts a request whose caller went away.

``kill(reason)`` fails every queued and decoding request, and every later one, with
``GeneratorDown`` (a ``GeneratorError``: the rollout fails those trajectories as infrastructure
failures); ``restart()`` serves again. Counters: ``stats()`` (the ``GeneratorStats`` of the real
engine), ``tokens_between`` and ``utilisation`` over a time window, and the tokens lost to kills.

``EpisodeEngine`` is what the rollout gets per episode (``engine_for``): the shared engine, timing
the episode's turns (``Episode``) and counting the requests a kill lost.
"""

from __future__ import annotations

import bisect
import itertools
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal

import anyio

from actors.generator import GeneratorError, GeneratorStats
from policies.chat import format_tool_call
from policies.throughput import saturation_rate, step_time
from policies.tokens import ChatTokenizer
from policies.types import Generation, PromptImage, SamplingConfig, ToolCall

Script = Callable[[list[int]], list[int]]


class GeneratorDown(GeneratorError):
    """The simulated engine was killed: the request was lost with it."""


class _Request:
    def __init__(self, tokens: list[int], arrived: float) -> None:
        self.tokens, self.arrived = tokens, arrived
        self.emitted = 0
        self.done = anyio.Event()
        self.error: str | None = None


class SimulatedGenerator:
    """Continuous batching on a virtual clock. Use inside ``async with SimulatedGenerator.running(...)``."""

    def __init__(
        self,
        script: Script,
        *,
        step_t0_s: float,
        step_t1_s: float,
        max_num_seqs: int,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if step_t0_s < 0 or step_t1_s < 0 or step_t0_s + step_t1_s <= 0:
            raise ValueError(
                f"SimulatedGenerator step_t0_s, step_t1_s must be >= 0 with a positive sum, "
                f"got {step_t0_s}, {step_t1_s}"
            )
        if max_num_seqs < 1:
            raise ValueError(f"SimulatedGenerator max_num_seqs must be >= 1, got {max_num_seqs}")
        self.version = 0
        self._script, self._clock = script, clock
        self.t0, self.t1, self.max_num_seqs = step_t0_s, step_t1_s, max_num_seqs
        self._queue: deque[_Request] = deque()
        self._active: list[_Request] = []
        self._wake = anyio.Event()
        self._now_v = 0.0  # virtual time at which the next step starts
        self._down: str | None = None
        self._step_ends: list[float] = []
        self._tokens_cum: list[int] = [0]  # tokens emitted by the end of each step (prefix sums)
        self._counts = {"requests": 0, "prompt_tokens": 0, "weight_updates": 0, "killed_tokens": 0}
        self._busy_s = 0.0

    @classmethod
    @asynccontextmanager
    async def running(cls, script: Script, **kwargs: Any) -> AsyncIterator[SimulatedGenerator]:
        """A generator whose engine loop lives in this context."""
        engine = cls(script, **kwargs)
        async with anyio.create_task_group() as tg:
            tg.start_soon(engine._loop, name="sim-engine")
            try:
                yield engine
            finally:
                engine.kill("the engine was shut down")
                tg.cancel_scope.cancel()

    # -- the Engine interface -------------------------------------------------------------------

    async def generate(
        self, prompt_ids: list[int], sampling: SamplingConfig, images: Sequence[PromptImage] = ()
    ) -> Generation:
        if self._down is not None:
            raise GeneratorDown(f"simulated engine is down: {self._down}")
        tokens = list(self._script(prompt_ids))
        if not tokens:
            raise GeneratorError("simulated engine: the script returned no tokens for this prompt")
        finish: Literal["stop", "length"] = "stop"
        if len(tokens) > sampling.max_tokens:
            tokens, finish = tokens[: sampling.max_tokens], "length"
        request = _Request(tokens, self._clock())
        self._counts["requests"] += 1
        self._counts["prompt_tokens"] += len(prompt_ids)
        self._queue.append(request)
        self._wake.set()
        try:
            await request.done.wait()
        finally:
            if not request.done.is_set():  # the caller was cancelled: abort, as vLLM does
                self._abort(request)
        if request.error is not None:
            raise GeneratorDown(f"simulated engine is down: {request.error}")
        return Generation(
            token_ids=tokens, logprobs=[0.0] * len(tokens), version=self.version, finish_reason=finish
        )

    async def update_weights(self, version: int, path: str) -> None:
        """No weights to load: record the version the next turns report."""
        self.version = version
        self._counts["weight_updates"] += 1

    # -- faults -----------------------------------------------------------------------------------

    def kill(self, reason: str) -> int:
        """Fail every queued and decoding request, and every later one until ``restart``; how many
        requests were lost."""
        self._down = reason
        lost = [*self._active, *self._queue]
        self._active.clear()
        self._queue.clear()
        for request in lost:
            request.error = reason
            self._counts["killed_tokens"] += request.emitted
            request.done.set()
        return len(lost)

    def _abort(self, request: _Request) -> None:
        if request in self._active:
            self._active.remove(request)
        elif request in self._queue:
            self._queue.remove(request)

    def restart(self) -> None:
        self._down = None

    @property
    def alive(self) -> bool:
        return self._down is None

    # -- counters ---------------------------------------------------------------------------------

    @property
    def generated_tokens(self) -> int:
        """Tokens emitted so far (those of killed requests included)."""
        return self._tokens_cum[-1]

    @property
    def killed_tokens(self) -> int:
        """Tokens emitted for requests that a kill then lost."""
        return self._counts["killed_tokens"]

    @property
    def steps(self) -> int:
        return len(self._step_ends)

    def timeline(self) -> list[tuple[float, int]]:
        """``(end, batch)`` of every step so far, on the virtual clock."""
        batches = [b - a for a, b in zip(self._tokens_cum, self._tokens_cum[1:], strict=False)]
        return list(zip(self._step_ends, batches, strict=True))

    def tokens_between(self, start: float, end: float) -> int:
        """Tokens emitted by the steps that ended in ``(start, end]`` (clock seconds)."""
        if end < start:
            raise ValueError(f"tokens_between: end {end} is before start {start}")
        lo = bisect.bisect_right(self._step_ends, start)
        hi = bisect.bisect_right(self._step_ends, end)
        return self._tokens_cum[hi] - self._tokens_cum[lo]

    def utilisation(self, start: float, end: float) -> float:
        """Tokens emitted in ``(start, end]`` over what the engine emits saturated in that time."""
        if end <= start:
            raise ValueError(f"utilisation: the window ({start}, {end}] is empty")
        return self.tokens_between(start, end) / (
            (end - start) * saturation_rate(self.max_num_seqs, self.t0, self.t1)
        )

    def stats(self) -> GeneratorStats:
        return GeneratorStats(
            requests=self._counts["requests"],
            prompt_tokens=self._counts["prompt_tokens"],
            generated_tokens=self.generated_tokens,
            busy_s=self._busy_s,
            weight_updates=self._counts["weight_updates"],
            weight_update_s=0.0,
        )

    # -- the engine loop --------------------------------------------------------------------------

    async def _loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            if self._queue:  # idle until now: the first step starts when the first request arrived
                self._now_v = max(self._now_v, self._queue[0].arrived)
            while self._queue or self._active:
                self._admit()
                if not self._active:  # every queued request arrived after this virtual instant
                    self._now_v = self._queue[0].arrived
                    continue
                batch = len(self._active)
                end = self._now_v + step_time(batch, self.t0, self.t1)
                delay = end - self._clock()
                if delay > 0:
                    await anyio.sleep(delay)
                if not self._active:  # killed while the step ran: its tokens are lost with it
                    self._now_v = end
                    continue
                self._step(end)

    def _admit(self) -> None:
        while self._queue and len(self._active) < self.max_num_seqs and self._queue[0].arrived <= self._now_v:
            self._active.append(self._queue.popleft())

    def _step(self, end: float) -> None:
        batch = len(self._active)
        self._busy_s += end - self._now_v
        self._step_ends.append(end)
        self._tokens_cum.append(self._tokens_cum[-1] + batch)
        self._now_v = end
        still = []
        for request in self._active:
            request.emitted += 1
            if request.emitted == len(request.tokens):
                request.done.set()
            else:
                still.append(request)
        self._active = still


@dataclass(frozen=True)
class Episode:
    """One completed episode: when its last turn came back, the seconds its turns spent in
    ``generate`` (decoding, queueing for a slot included), and the seconds from its first
    ``generate`` call to then (decoding plus tool calls plus the orchestrator between)."""

    completed_at: float
    decode_s: float
    span_s: float


class EpisodeEngine:
    """The shared engine as one episode's ``Engine``: reports the episode when its last turn (by
    ``script.turn_index``) comes back, and counts ``lost["generator"]`` when a kill fails a turn."""

    def __init__(
        self,
        sim: SimulatedGenerator,
        script: LatencyToolScript,
        on_completion: Callable[[Episode], None],
        lost: dict[str, int],
    ) -> None:
        self._sim, self._script, self._on_completion, self._lost = sim, script, on_completion, lost
        self._first: float | None = None
        self._decode_s = 0.0

    @property
    def version(self) -> int:
        return self._sim.version

    async def generate(
        self, prompt_ids: list[int], sampling: SamplingConfig, images: Sequence[PromptImage] = ()
    ) -> Generation:
        last = self._script.turn_index(prompt_ids) >= self._script.turns - 1
        called = time.perf_counter()
        self._first = called if self._first is None else self._first
        try:
            generation = await self._sim.generate(prompt_ids, sampling, images)
        except GeneratorDown:
            self._lost["generator"] = self._lost.get("generator", 0) + 1
            raise
        now = time.perf_counter()
        self._decode_s += now - called
        if last:
            self._on_completion(Episode(now, self._decode_s, now - self._first))
        return generation

    async def update_weights(self, version: int, path: str) -> None:
        await self._sim.update_weights(version, path)


class LatencyToolScript:
    """The scripted policy of the benchmark: turns 1..T-1 call the latency server's tool with the
    workload's latency, turn T answers; every turn is exactly ``tokens_per_turn`` tokens (filler
    prose before the call or answer, then eos). The turn is read off the prompt: each earlier turn
    added two messages (the model's turn and the tool's result), each ending in eos."""

    FILLER = "Let me think about this step by step before I act. "
    ANSWER = "The answer is done."

    def __init__(
        self,
        tokenizer: ChatTokenizer,
        *,
        tool_name: str,
        seconds: float,
        turns: int,
        tokens_per_turn: int,
        opening_messages: int = 2,
    ) -> None:
        if turns < 1:
            raise ValueError(f"LatencyToolScript turns must be >= 1, got {turns}")
        eos = tokenizer.eos_token_id
        if eos is None:
            raise ValueError("LatencyToolScript needs a tokenizer with an eos_token_id")
        self.eos, self.turns, self.opening = int(eos), turns, opening_messages
        call = format_tool_call(ToolCall(name=tool_name, arguments={"seconds": seconds}))
        filler = _encode(tokenizer, self.FILLER * (tokens_per_turn // 4 + 1))
        self.call_turn = _padded(filler, _encode(tokenizer, "\n" + call), eos, tokens_per_turn, "tool call")
        self.final_turn = _padded(
            filler, _encode(tokenizer, "\n" + self.ANSWER), eos, tokens_per_turn, "answer"
        )

    def turn_index(self, prompt_ids: Sequence[int]) -> int:
        """0-based index of the turn this prompt asks for."""
        return max(0, (list(prompt_ids).count(self.eos) - self.opening) // 2)

    def __call__(self, prompt_ids: list[int]) -> list[int]:
        return list(self.final_turn if self.turn_index(prompt_ids) >= self.turns - 1 else self.call_turn)


def _encode(tokenizer: ChatTokenizer, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


def _padded(filler: list[int], body: list[int], eos: int, total: int, what: str) -> tuple[int, ...]:
    room = total - len(body) - 1
    if room < 0:
        raise ValueError(
            f"tokens_per_turn={total} is too small for the {what} turn: it needs {len(body) + 1} tokens"
        )
    return tuple(itertools.chain(filler[:room], body, [eos]))
