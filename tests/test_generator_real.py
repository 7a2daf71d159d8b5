"""The Generator on a real vLLM engine (SmolLM2-135M, fp32, CPU): turns, logprobs, weight updates.

One engine and one learner serve the whole module (starting them is the expensive part), so the
tests run in file order against a policy that changes: the first ones use the base weights, then
the learner's update is loaded, the refusals must leave it in place, and the last test loads
perturbed weights of its own. Every test but the last leaves engine and learner agreeing, so any
of them also passes when run alone. In fp32 vLLM's sampled-token logprobs equal a transformers forward
pass of the same weights to ~1e-5, which is what makes exact train/inference agreement testable.
"""

from __future__ import annotations

import copy
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import torch
from safetensors.torch import load_file, save_file

from actors.generator import GeneratorError, VllmEngine, WeightUpdateError, engine_use
from policies.engine import Engine
from policies.types import Generation, SamplingConfig, TrainSample

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

AGREE = 1e-4
GREEDY = SamplingConfig(max_tokens=32, temperature=0.0)
SAMPLED = SamplingConfig(max_tokens=48, temperature=1.0)
# Agreement checks compare 48 tokens whatever the model's appetite for short answers.
COMPARED = SamplingConfig(max_tokens=48, temperature=1.0, ignore_eos=True)


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"  # module scope: the engine's event loop must outlive a single test


@pytest.fixture(scope="module")
async def engine(model_dir: Path) -> AsyncIterator[VllmEngine]:
    engine = VllmEngine(str(model_dir), dtype="float32", max_model_len=1024, max_num_seqs=8, seed=0)
    assert os.listdir(engine.rpc_dir)  # vLLM's IPC sockets live in the engine's own folder
    yield engine
    await engine.shutdown()
    assert not await anyio.Path(engine.rpc_dir).exists()  # and go with it, not left behind in the temp dir


@pytest.fixture(scope="module")
def tokenizer(model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


@pytest.fixture(scope="module")
def hf_model(model_dir: Path) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def learner(model_dir: Path) -> Any:
    from actors.learner import Learner
    from specs.config import GrpoConfig, LearnerConfig

    return Learner(str(model_dir), LearnerConfig(lr=1e-4), GrpoConfig(), dtype="float32", seed=0)


@pytest.fixture(scope="module")
def shm_dir() -> Iterator[Path]:
    """Weight files in memory when the machine has /dev/shm (as the training loop does)."""
    path = Path(tempfile.mkdtemp(prefix="", dir="/dev/shm" if Path("/dev/shm").is_dir() else None))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _prompt(tokenizer: Any, question: str, system: str | None = None) -> list[int]:
    messages = [{"role": "user", "content": question}]
    if system is not None:
        messages.insert(0, {"role": "system", "content": system})
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _sea_prompt(tokenizer: Any) -> list[int]:
    """A prompt longer than a KV block (128 tokens on CPU), so vLLM's prefix cache keeps it."""
    system = "You are a careful writer. " + "You write about the sea, ships, tides and weather. " * 20
    prompt = _prompt(tokenizer, "Write one sentence about the sea.", system)
    assert len(prompt) > 2 * 128
    return prompt


def _sample(prompt: list[int], turn: Generation, advantage: float = 0.0) -> TrainSample:
    return TrainSample(
        token_ids=prompt + turn.token_ids,
        trainable=[0] * len(prompt) + [1] * len(turn.token_ids),
        logprobs=[0.0] * len(prompt) + turn.logprobs,
        advantage=advantage,
    )


def _learner_logprobs(learner: Any, prompt: list[int], turn: Generation) -> list[float]:
    return learner.sequence_logprobs([_sample(prompt, turn)])[0][len(prompt) :]


def _hf_logprobs(model: Any, prompt: list[int], turn: Generation) -> list[float]:
    with torch.no_grad():
        logits = model(torch.tensor([prompt + turn.token_ids])).logits[0].float()
    logprobs = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
    return logprobs.gather(1, torch.tensor(turn.token_ids)[:, None])[:, 0].tolist()


def _mean_abs(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b) and a
    return sum(abs(x - y) for x, y in zip(a, b, strict=True)) / len(a)


@pytest.fixture
def learner_exports(learner: Any, shm_dir: Path) -> tuple[str, str]:
    """The learner's current weights, exported in full and again without ``lm_head.weight``."""
    full = learner.export_weights(str(shm_dir / "current.safetensors"))
    tensors = load_file(full)
    del tensors["lm_head.weight"]
    headless = str(shm_dir / "headless.safetensors")
    save_file(tensors, headless)
    return full, headless


async def test_a_greedy_turn_ends_with_eos_and_has_one_logprob_per_token(
    engine: VllmEngine, tokenizer: Any
) -> None:
    assert isinstance(engine, Engine)
    turn = await engine.generate(_prompt(tokenizer, "What is 2+3? Answer briefly."), GREEDY)
    assert turn.finish_reason == "stop"
    assert turn.token_ids[-1] == tokenizer.eos_token_id
    assert tokenizer.eos_token_id not in turn.token_ids[:-1]
    assert len(turn.logprobs) == len(turn.token_ids)
    assert all(lp <= 0.0 for lp in turn.logprobs)
    assert turn.version == 0


async def test_greedy_generation_is_the_same_alone_and_in_a_concurrent_batch(
    engine: VllmEngine, tokenizer: Any
) -> None:
    prompt = _prompt(tokenizer, "Name a colour.")
    alone = await engine.generate(prompt, GREEDY)
    turns: list[Generation] = []

    async def one() -> None:
        turns.append(await engine.generate(prompt, GREEDY))

    before = engine.stats()
    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(one)
    use = engine_use(before, engine.stats(), wall_s=1.0)
    assert [t.token_ids for t in turns] == [alone.token_ids] * 4
    assert max(_mean_abs(t.logprobs, alone.logprobs) for t in turns) < AGREE
    assert 1.0 < use["engine_open"] <= 4.0  # the four were open together for most of the batch


async def test_max_tokens_cuts_the_turn_with_finish_reason_length(engine: VllmEngine, tokenizer: Any) -> None:
    sampling = SamplingConfig(max_tokens=5, temperature=1.0, ignore_eos=True)
    turn = await engine.generate(_prompt(tokenizer, "Tell me a long story."), sampling)
    assert turn.finish_reason == "length"
    assert len(turn.token_ids) == len(turn.logprobs) == 5


async def test_a_prompt_that_fills_the_context_is_refused_by_name(engine: VllmEngine) -> None:
    with pytest.raises(GeneratorError, match="max_model_len=1024"):
        await engine.generate([1] * 1024, GREEDY)


async def test_a_weight_update_waits_for_the_turn_in_flight_and_holds_new_ones(
    engine: VllmEngine, tokenizer: Any, learner_exports: tuple[str, str]
) -> None:
    # Async placement: weights change while episodes run, never inside a turn.
    long = SamplingConfig(max_tokens=24, temperature=1.0, ignore_eos=True)
    turns: dict[str, Any] = {}
    base = engine.version

    async def turn(name: str) -> None:
        turns[name] = await engine.generate(_prompt(tokenizer, "Count to ten."), long)

    async with anyio.create_task_group() as tg:
        tg.start_soon(turn, "before")
        with anyio.fail_after(30):
            await anyio.wait_all_tasks_blocked()  # the request is now waiting on the engine
        tg.start_soon(engine.update_weights, base + 1, learner_exports[0])
        await anyio.wait_all_tasks_blocked()  # the update is draining
        tg.start_soon(turn, "during")
    assert turns["before"].version == base and len(turns["before"].token_ids) == 24
    assert turns["during"].version == base + 1 == engine.version


async def test_a_weight_update_that_cannot_drain_in_time_changes_nothing(
    engine: VllmEngine, tokenizer: Any, learner_exports: tuple[str, str]
) -> None:
    long = SamplingConfig(max_tokens=64, temperature=1.0, ignore_eos=True)
    version = engine.version
    async with anyio.create_task_group() as tg:
        tg.start_soon(engine.generate, _prompt(tokenizer, "Count to ten."), long)
        with anyio.fail_after(30):
            await anyio.wait_all_tasks_blocked()
        with pytest.raises(WeightUpdateError, match="still in flight"):
            await engine.update_weights(version + 1, learner_exports[0], 0.0)
    assert engine.version == version


async def test_sleep_holds_new_turns_until_wake_up(engine: VllmEngine, tokenizer: Any) -> None:
    # Colocated placement: while the learner trains the engine serves nothing (on a GPU it also
    # hands its memory over: tests/test_gpu.py).
    await engine.sleep()
    done: list[Any] = []

    async def turn() -> None:
        done.append(await engine.generate(_prompt(tokenizer, "Say hi."), SamplingConfig(max_tokens=4)))

    async with anyio.create_task_group() as tg:
        tg.start_soon(turn)
        with anyio.fail_after(30):
            await anyio.wait_all_tasks_blocked()
        assert done == []
        await engine.wake_up()
    assert len(done) == 1 and len(done[0].token_ids) <= 4


async def test_sampled_logprobs_equal_the_learner_before_any_update(
    engine: VllmEngine, tokenizer: Any, learner: Any
) -> None:
    prompt = _sea_prompt(tokenizer)
    turn = await engine.generate(prompt, COMPARED)
    assert _mean_abs(turn.logprobs, _learner_logprobs(learner, prompt, turn)) < AGREE


async def test_after_a_learner_update_the_engine_samples_with_the_learner_logprobs(
    engine: VllmEngine, tokenizer: Any, learner: Any, hf_model: Any, shm_dir: Path
) -> None:
    # The same long prompt before and after the update: stale prefix-cache KV would show here.
    prompt = _sea_prompt(tokenizer)
    rollout = await engine.generate(prompt, SAMPLED)
    learner.train_step([_sample(prompt, rollout, advantage=1.0)])
    path = learner.export_weights(str(shm_dir / "update.safetensors"))
    await engine.update_weights(learner.version, path)
    assert engine.version == learner.version == 1 == await engine.get_version()

    turn = await engine.generate(prompt, COMPARED)
    assert turn.version == 1
    assert _mean_abs(turn.logprobs, _learner_logprobs(learner, prompt, turn)) < AGREE
    # The weights really moved: the base policy gives the same tokens clearly different logprobs.
    assert _mean_abs(turn.logprobs, _hf_logprobs(hf_model, prompt, turn)) > 10 * AGREE


async def test_an_export_without_lm_head_is_refused_and_the_served_policy_kept(
    engine: VllmEngine, tokenizer: Any, learner: Any, learner_exports: tuple[str, str]
) -> None:
    version = engine.version
    with pytest.raises(WeightUpdateError, match="lm_head.weight"):
        await engine.update_weights(version + 1, learner_exports[1])
    assert engine.version == version
    prompt = _sea_prompt(tokenizer)
    turn = await engine.generate(prompt, COMPARED)
    assert _mean_abs(turn.logprobs, _learner_logprobs(learner, prompt, turn)) < AGREE


async def test_the_worker_reports_a_head_left_stale_by_a_headless_reload(
    engine: VllmEngine, learner_exports: tuple[str, str]
) -> None:
    # Past the driver's check, straight to the worker: the second line of defence must see it too.
    full, headless = learner_exports
    reports = await engine._live().collective_rpc("mcprl_reload_weights", args=(headless,))
    assert [any("ParallelLMHead" in m for m in r["stale"]) for r in reports] == [True]
    reports = await engine._live().collective_rpc("mcprl_reload_weights", args=(full,))
    assert [r["stale"] for r in reports] == [[]]


async def test_perturbed_weights_reproduce_the_transformers_logprobs_of_the_perturbed_model(
    engine: VllmEngine, tokenizer: Any, hf_model: Any, shm_dir: Path
) -> None:
    model = copy.deepcopy(hf_model)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():  # tied: the embedding and the head move together
            param.add_(0.02 * param.std() * torch.randn(param.shape, generator=generator))
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    state["lm_head.weight"] = model.get_output_embeddings().weight.detach().clone().contiguous()
    path = shm_dir / "perturbed.safetensors"
    save_file(state, str(path))
    before = engine.stats()
    await engine.update_weights(7, str(path))

    prompt = _prompt(tokenizer, "What is the capital of France?")
    turn = await engine.generate(prompt, COMPARED)
    assert turn.version == 7
    assert _mean_abs(turn.logprobs, _hf_logprobs(model, prompt, turn)) < AGREE
    assert _mean_abs(turn.logprobs, _hf_logprobs(hf_model, prompt, turn)) > 10 * AGREE
    after = engine.stats()
    assert after.weight_updates == before.weight_updates + 1
    assert after.generated_tokens == before.generated_tokens + len(turn.token_ids)
    assert after.busy_s > before.busy_s
