"""Image observations through the real engines: the small vision-language policy
(``launch/build_vlm.py``) on vLLM and on the DeepSpeed learner, fp32, CPU.

Episodes of the agent loop whose context holds screenshots (one in the task, one per tool result)
are sampled by vLLM, which gets each prompt with its images folded back to their placeholders and
must expand them into exactly the recorded tokens (``actors.generator``); they replay token for
token, image tokens included (``policies.replay``); the learner, fed the same pixels at the same
tokens, gives vLLM's sampled-token logprobs back, and a different image gives clearly different
ones (the pixels are used, not ignored); one GRPO update on these episodes reaches vLLM, which then
samples with the learner's logprobs again.

The first turn of each episode is the scripted screenshot call (``OpensWithACall``): the untrained
policy does not call tools, and a screenshot in a tool result is what is tested. Every later turn is
vLLM's, and only those are compared.
"""

from __future__ import annotations

import base64
import io
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest

from policies.batch import rl_samples
from policies.engine import Engine
from policies.react import EpisodeLimits, build_messages, image_ref, run_episode
from policies.replay import check_replay, turn_tokens
from policies.tokens import ChatRecorder
from policies.types import Generation, PromptImage, SamplingConfig, ToolResult, ToolSpec, TrainSample
from policies.vision import ProcessorVision
from specs.trajectory import Score, Trajectory, Verdict

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

AGREE = 1e-4
SHOT = '<tool_call>\n{"name": "browser__screenshot", "arguments": {}}\n</tool_call>'
SAMPLING = SamplingConfig(max_tokens=24, temperature=1.0)


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"  # module scope: the engine's event loop must outlive a single test


@pytest.fixture(scope="module")
async def engine(vlm_dir: Path) -> AsyncIterator[Any]:
    from actors.generator import VllmEngine

    engine = VllmEngine(
        str(vlm_dir), dtype="float32", max_model_len=2048, max_num_seqs=8, seed=0, max_images_per_prompt=4
    )
    yield engine
    await engine.shutdown()


def png(color: tuple[int, int, int], size: tuple[int, int] = (480, 320)) -> bytes:
    from PIL import Image, ImageDraw

    image = Image.new("RGB", size, (245, 245, 245))
    ImageDraw.Draw(image).rectangle((40, 40, size[0] - 40, 120), fill=color)
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


class OpensWithACall:
    """The first turn is the scripted screenshot call, every later one the engine's own."""

    def __init__(self, engine: Engine, tokenizer: Any) -> None:
        self._engine, self._tok, self.turns = engine, tokenizer, 0

    async def generate(
        self, prompt_ids: list[int], sampling: SamplingConfig, images: Sequence[PromptImage] = ()
    ) -> Generation:
        self.turns += 1
        if self.turns == 1:
            ids = self._tok.encode(SHOT + "<|im_end|>", add_special_tokens=False)
            return Generation(token_ids=ids, logprobs=[0.0] * len(ids), version=0, finish_reason="stop")
        return await self._engine.generate(prompt_ids, sampling, images)


class Browser:
    """Every screenshot a new colour."""

    def __init__(self) -> None:
        self.calls = 0

    async def call(self, env_id: str, name: str, arguments: dict[str, Any], timeout_s: float) -> ToolResult:
        self.calls += 1
        data = base64.b64encode(png((30 + 50 * self.calls, 120, 200))).decode()
        return ToolResult(
            text="The page. [image 1: image/png, attached]",
            images=({"mimeType": "image/png", "data": data},),
            server="browser",
            tool="screenshot",
        )


async def episode(engine: Engine, tokenizer: Any, vision: ProcessorVision, k: int) -> Trajectory:
    recorder = ChatRecorder(tokenizer, vision=vision)
    task = image_ref(
        {"mimeType": "image/png", "data": base64.b64encode(png((200, 40, 40))).decode()}, recorder.images
    )
    messages = build_messages(
        "What does the red box say? Take a screenshot to see the page now.",
        [ToolSpec(name="browser__screenshot", server="browser", tool="screenshot")],
        None,
    )
    messages[-1]["content"] = [
        {"type": "text", "text": messages[-1]["content"] + " The page at the start: "},
        {"type": "image", "sha256": task.sha256, "mime_type": task.mime_type},
    ]
    t = await run_episode(
        task_id=f"screen-{k}",
        group_id="screen",
        messages=messages,
        recorder=recorder,
        engine=OpensWithACall(engine, tokenizer),
        tools=Browser(),
        env_id="e",
        sampling=SAMPLING,
        limits=EpisodeLimits(max_turns=3, max_new_tokens=24, max_context_tokens=2048),
    )
    passed = k % 2 == 0  # a mixed group, so every episode has an advantage
    t.score = Score.of((Verdict(func="f", op="o", passed=passed, message=""),))
    return t


def sampled_turns(t: Trajectory) -> list[tuple[int, int]]:
    """The ``[start, end)`` of every turn vLLM sampled (all but the scripted first)."""
    return turn_tokens(t)[1:]


def learner_logprobs(learner: Any, t: Trajectory, samples: list[TrainSample]) -> list[float]:
    [sample] = samples
    [lp] = learner.sequence_logprobs([sample])
    return [lp[i] for start, end in sampled_turns(t) for i in range(start, end)]


async def test_a_screenshot_episode_through_vllm_replays_and_the_learner_sees_the_same_pixels(
    engine: Any, vlm_tokenizer: Any, vision: ProcessorVision, vlm_dir: Path, tmp_path: Path
) -> None:
    from actors.learner import Learner
    from specs.algorithm import GrpoConfig
    from specs.config import LearnerConfig

    group = [await episode(engine, vlm_tokenizer, vision, k) for k in range(4)]
    for t in group:
        assert t.status == "ok" and t.num_turns >= 2, t.error
        assert len(t.image_spans) >= 2 and len(t.images) >= 2  # the task's screenshot and the tool's
        for span in t.image_spans:
            assert not any(t.trainable[span.start : span.start + span.length])
        assert check_replay(t, lambda: ChatRecorder(vlm_tokenizer, vision=vision)) is None

    learner = Learner(str(vlm_dir), LearnerConfig(lr=1e-4, micro_batch_size=2), GrpoConfig(), dtype="float32")
    t = group[0]
    whole = rl_samples([group])[:1]  # one segment: the whole episode, its images in place
    assert whole[0].token_ids == t.token_ids and len(whole[0].images) == len(t.image_spans)
    rollout = [t.logprobs[i] for start, end in sampled_turns(t) for i in range(start, end)]
    assert rollout and mean_abs(learner_logprobs(learner, t, whole), rollout) < AGREE
    # Another picture at the same tokens: the learner reads the pixels, its logprobs move.
    other = base64.b64encode(png((20, 200, 20))).decode()
    swapped = [msgspec.structs.replace(whole[0], image_data={k: other for k in whole[0].image_data})]
    assert mean_abs(learner_logprobs(learner, t, swapped), rollout) > 10 * AGREE

    learner.train_step(rl_samples([group]))
    path = learner.export_weights(str(tmp_path / "update.safetensors"))
    await engine.update_weights(learner.version, path)
    after = await episode(engine, vlm_tokenizer, vision, 0)
    assert {after.versions[-1], engine.version} == {1}
    replayed = [after.logprobs[i] for start, end in sampled_turns(after) for i in range(start, end)]
    assert mean_abs(learner_logprobs(learner, after, rl_samples([[after, group[1]]])[:1]), replayed) < AGREE


def mean_abs(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b) and a
    return sum(abs(x - y) for x, y in zip(a, b, strict=True)) / len(a)
