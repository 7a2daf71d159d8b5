"""A vision-language policy's images, from a tool result to the learner's batch, without an engine:
the recorder writes each image exactly as the model's processor expands it (untrainable), the agent
loop hands the engine each prompt's images where their tokens are, a window rule drops old
screenshots and replays token for token, samples carry their images, and the learner's checks
and the generator's folding refuse what does not fit. (The real vLLM engine and the DeepSpeed
learner on the same episodes: ``tests/test_vision_real.py``.)"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest

from actors.learner_batch import LearnerError, validate
from actors.vllm_requests import GeneratorError, check_expansion, fold_images
from policies.batch import demonstration_samples
from policies.chat import format_tool_result
from policies.react import EpisodeLimits, build_messages, image_ref, run_episode
from policies.replay import check_replay
from policies.tokens import ChatRecorder, RecorderError
from policies.types import Generation, PromptImage, SamplingConfig, ToolResult, ToolSpec, TrainSample
from policies.vision import ProcessorVision, is_multimodal
from specs.observation_rule import ObservationRule
from specs.trajectory import ImageRef, ImageSpan, Score, Verdict

pytestmark = pytest.mark.anyio

SHOT = '<tool_call>\n{"name": "browser__screenshot", "arguments": {}}\n</tool_call>'


def png(color: tuple[int, int, int], size: tuple[int, int] = (320, 200)) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, format="PNG")
    return out.getvalue()


def test_a_model_directory_is_multimodal_when_its_config_has_a_vision_config(
    vlm_dir: Path, model_dir: Path
) -> None:
    assert is_multimodal(vlm_dir) and not is_multimodal(model_dir)
    assert not is_multimodal(model_dir / "missing")


def test_an_image_becomes_the_processors_tokens_around_the_placeholder(built_vlm: Path) -> None:
    vision = ProcessorVision(built_vlm)
    ids = vision.expand(png((200, 30, 30)))
    text = vision.processor.tokenizer.decode(ids)
    assert text == "<fake_token_around_image><global-img>" + "<image>" * 16 + "<fake_token_around_image>"
    assert vision.placeholder == "<image>" and len(vision.placeholder_ids) == 1


def test_the_recorder_writes_each_image_as_the_processor_does_and_never_trainable(
    vision: ProcessorVision, vlm_tokenizer: Any
) -> None:
    red, blue = png((200, 30, 30)), png((30, 30, 200), (640, 480))
    recorder = ChatRecorder(vlm_tokenizer, vision=vision)
    refs = [
        image_ref({"mimeType": "image/png", "data": base64.b64encode(b).decode()}, recorder.images)
        for b in (red, blue)
    ]
    opening = [
        {"role": "system", "content": "You use a browser."},
        {"role": "user", "content": [{"type": "text", "text": "What changed? "}, image_part(refs[0])]},
    ]
    prompt = recorder.start(opening)
    assert prompt == processor_ids(vision, vlm_tokenizer, opening, [red])
    turn = vlm_tokenizer.encode(SHOT + "<|im_end|>", add_special_tokens=False)
    recorder.add_model_turn(
        Generation(token_ids=turn, logprobs=[-0.5] * len(turn), version=0, finish_reason="stop")
    )
    shown = ToolResult(
        text="Screenshot: [image 1: image/png, attached]", images=({"mimeType": "image/png", "data": "x"},)
    )
    prompt = recorder.add_messages([format_tool_result(shown, images=[refs[1]])])

    assert prompt == processor_ids(vision, vlm_tokenizer, recorder.messages, [red, blue])
    spans = recorder.trajectory_fields()["image_spans"]
    assert [s.sha256 for s in spans] == [r.sha256 for r in refs]
    for span, data in zip(spans, (red, blue), strict=True):
        assert prompt[span.start : span.start + span.length] == vision.expand(data)
        assert not any(recorder.trainable[span.start : span.start + span.length])
    assert recorder.prompt_images() == [
        PromptImage(data=d, start=s.start, length=s.length, placeholder=vision.placeholder_ids)
        for s, d in zip(spans, (red, blue), strict=True)
    ]


def test_an_image_part_for_a_text_policy_or_a_stray_placeholder_is_refused(
    vision: ProcessorVision, vlm_tokenizer: Any, tokenizer: Any
) -> None:
    red = png((200, 30, 30))
    text_recorder = ChatRecorder(tokenizer)
    ref = image_ref({"mimeType": "image/png", "data": base64.b64encode(red).decode()}, text_recorder.images)
    with pytest.raises(
        RecorderError, match=r"messages\[1\] has an image part but the policy is a text model"
    ):
        text_recorder.start(
            [{"role": "system", "content": "s"}, {"role": "user", "content": [image_part(ref)]}]
        )
    recorder = ChatRecorder(vlm_tokenizer, vision=vision)
    recorder.images.update(text_recorder.images)
    stray = [{"role": "user", "content": [{"type": "text", "text": "an <image> tag"}, image_part(ref)]}]
    with pytest.raises(RecorderError, match=r"2 image placeholder\(s\) '<image>' where the messages have 1"):
        recorder.start(stray)
    missing = [{"role": "user", "content": [{"type": "image", "sha256": "f" * 64}]}]
    with pytest.raises(
        RecorderError, match="ChatRecorder: image ffffffffffff... is not among the 0 images held"
    ):
        ChatRecorder(vlm_tokenizer, vision=vision).start(missing)


def test_a_results_images_become_parts_where_its_markers_were() -> None:
    refs = [ImageRef(sha256=c * 64, mime_type="image/png", size=1) for c in "ab"]
    result = ToolResult(text="before [image 1: image/png, attached] mid [image 2: image/png, attached]")
    message = format_tool_result(result, images=refs)
    assert message["content"] == [
        {"type": "text", "text": "<tool_response>\nbefore "},
        {"type": "image", "sha256": "a" * 64, "mime_type": "image/png"},
        {"type": "text", "text": " mid "},
        {"type": "image", "sha256": "b" * 64, "mime_type": "image/png"},
        {"type": "text", "text": "\n</tool_response>"},
    ]
    unmarked = format_tool_result(ToolResult(text="no markers"), images=refs[:1])
    assert unmarked["content"][1:] == [{"type": "image", "sha256": "a" * 64, "mime_type": "image/png"}]
    assert format_tool_result(result) == {
        "role": "tool",
        "content": f"<tool_response>\n{result.text}\n</tool_response>",
    }


class ScriptedTurns:
    """An engine that answers with the given texts in turn and keeps the images of each prompt."""

    def __init__(self, tokenizer: Any, texts: Sequence[str]) -> None:
        self._tok, self._texts, self.seen = tokenizer, list(texts), []

    async def generate(
        self, prompt_ids: list[int], sampling: SamplingConfig, images: Sequence[PromptImage] = ()
    ) -> Generation:
        self.seen.append((list(prompt_ids), list(images)))
        ids = self._tok.encode(self._texts.pop(0) + "<|im_end|>", add_special_tokens=False)
        return Generation(token_ids=ids, logprobs=[-0.1] * len(ids), version=0, finish_reason="stop")


class Screens:
    """A browser whose every screenshot is a new colour."""

    def __init__(self) -> None:
        self.calls = 0

    async def call(self, env_id: str, name: str, arguments: dict[str, Any], timeout_s: float) -> ToolResult:
        self.calls += 1
        data = base64.b64encode(png((40 * self.calls, 90, 160))).decode()
        return ToolResult(
            text="Page shown. [image 1: image/png, attached]",
            images=({"mimeType": "image/png", "data": data},),
            server="browser",
            tool="screenshot",
        )


async def screenshot_episode(tokenizer: Any, vision: ProcessorVision, rule: ObservationRule | None) -> Any:
    engine = ScriptedTurns(tokenizer, [SHOT, SHOT, SHOT, "The price is 12."])
    spec = ToolSpec(name="browser__screenshot", server="browser", tool="screenshot")
    t = await run_episode(
        task_id="t",
        group_id="g",
        messages=build_messages("Read the price.", [spec], None),
        recorder=ChatRecorder(tokenizer, vision=vision),
        engine=engine,
        tools=Screens(),
        env_id="e",
        sampling=SamplingConfig(),
        limits=EpisodeLimits(max_turns=4, max_new_tokens=64, max_context_tokens=4096),
        observation_rule=rule,
    )
    return t, engine


async def test_the_engine_gets_each_prompts_images_where_their_tokens_are(
    vision: ProcessorVision, vlm_tokenizer: Any
) -> None:
    t, engine = await screenshot_episode(vlm_tokenizer, vision, None)
    assert t.final_answer == "The price is 12." and len(t.images) == 3 and len(t.image_spans) == 3
    assert [len(images) for _, images in engine.seen] == [0, 1, 2, 3]
    prompt, images = engine.seen[-1]
    for image, span in zip(images, t.image_spans, strict=True):
        assert prompt[image.start : image.start + image.length] == vision.expand(image.data)
        assert image.start == span.start and base64.b64decode(t.images[span.sha256]) == image.data
    assert check_replay(t, lambda: ChatRecorder(vlm_tokenizer, vision=vision)) is None


async def test_a_window_rule_drops_old_screenshots_from_the_prompt_and_replays_them_exactly(
    vision: ProcessorVision, vlm_tokenizer: Any
) -> None:
    rule = ObservationRule(keep_last_costly=1)
    t, engine = await screenshot_episode(vlm_tokenizer, vision, rule)
    assert [len(images) for _, images in engine.seen] == [0, 1, 1, 1]
    assert len(t.segment_starts) == 3  # each new screenshot rewrote the one before into a placeholder
    newest = [images[0].data for _, images in engine.seen[1:]]
    assert len(set(newest)) == 3  # the prompt holds the newest screenshot only
    # every segment re-expands the images it shows, so a span per image per segment
    assert [s.start >= t.segment_starts[-1] for s in t.image_spans].count(True) == 1

    def factory() -> ChatRecorder:
        return ChatRecorder(vlm_tokenizer, vision=vision)

    assert check_replay(t, factory) is None
    moved = msgspec.structs.replace(t.image_spans[-1], start=t.image_spans[-1].start + 1)
    tampered = msgspec.structs.replace(t, image_spans=[*t.image_spans[:-1], moved])
    assert "image_spans differs from the recording" in (check_replay(tampered, factory) or "")


async def test_samples_carry_their_images_relative_to_their_row(
    vision: ProcessorVision, vlm_tokenizer: Any
) -> None:
    t, _ = await screenshot_episode(vlm_tokenizer, vision, ObservationRule(keep_last_costly=1))
    t.score = Score.of((Verdict(func="f", op="o", passed=True, message=""),))
    samples = demonstration_samples([t])
    assert len(samples) == len(t.segment_starts)
    for sample, start in zip(samples, t.segment_starts, strict=True):
        for span in sample.images:
            row = sample.token_ids[span.start : span.start + span.length]
            assert row == t.token_ids[start + span.start : start + span.start + span.length]
            assert row == vision.expand(base64.b64decode(sample.image_data[span.sha256]))
    validate(samples, "test", model_path="vlm", max_seq_len=None, vocab_size=0, multimodal=True)


def test_the_learner_refuses_images_it_cannot_feed() -> None:
    good = TrainSample(
        token_ids=[1, 2, 3, 4, 5],
        trainable=[0, 0, 0, 0, 1],
        logprobs=[0.0] * 5,
        images=[ImageSpan(sha256="a", start=1, length=2)],
        image_data={"a": "AAAA"},
    )

    def check(s: TrainSample, multimodal: bool = True) -> None:
        validate([s], "step", model_path="m", max_seq_len=None, vocab_size=0, multimodal=multimodal)

    check(good)
    with pytest.raises(LearnerError, match="step: sample 0 has 1 image\\(s\\) but m is a text model"):
        check(good, False)
    with pytest.raises(LearnerError, match="image 0's tokens are marked trainable"):
        check(msgspec.structs.replace(good, trainable=[0, 1, 0, 0, 1]))
    with pytest.raises(LearnerError, match="has no pixels in image_data"):
        check(msgspec.structs.replace(good, image_data={}))
    with pytest.raises(LearnerError, match="runs past the sample's 5 tokens"):
        check(msgspec.structs.replace(good, images=[ImageSpan(sha256="a", start=4, length=2)]))


def test_the_generator_folds_images_to_their_placeholder_and_refuses_another_expansion() -> None:
    image = PromptImage(data=b"", start=2, length=3, placeholder=(9,))
    assert fold_images("r", [1, 2, 7, 7, 7, 3], [image]) == [1, 2, 9, 3]
    with pytest.raises(GeneratorError, match="runs past the 4-token prompt"):
        fold_images("r", [1, 2, 7, 7], [image])
    check_expansion("r", [1, 2, 7, 7, 7, 3], [1, 2, 7, 7, 7, 3])
    with pytest.raises(GeneratorError, match="first difference at 4"):
        check_expansion("r", [1, 2, 7, 7, 7, 3], [1, 2, 7, 7, 3])


def image_part(ref: ImageRef) -> dict[str, str]:
    return {"type": "image", "sha256": ref.sha256, "mime_type": ref.mime_type}


def processor_ids(
    vision: ProcessorVision, tokenizer: Any, messages: list[dict[str, Any]], images: list[bytes]
) -> list[int]:
    """What the model's processor makes of the whole rendering and its images at once."""
    from policies.vision import decode_image

    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    out = vision.processor(text=text, images=[decode_image(b) for b in images], add_special_tokens=False)
    return [int(i) for i in out["input_ids"][0]]
