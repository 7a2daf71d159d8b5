"""Images that tools return (screenshots) kept by content hash: the gateway passes on only valid
base64, an episode keeps each image once with a ref on every call that returned it, and the
trajectory files hold the refs while the bytes go once to ``trajectories/images/<sha256>.png``."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from transformers import AutoTokenizer

from actors.mcp_results import ResultCaps, content_text
from launch.report import Reporter
from policies.react import EpisodeLimits, build_messages, run_episode
from policies.scripted import ScriptedEngine
from policies.tokens import ChatRecorder
from policies.types import SamplingConfig, ToolResult, ToolSpec
from specs.config import RunConfig
from specs.trajectory import CutRecord, ImageRef

PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d49444154789c6360000002"
    "0000050001e226059b0000000049454e44ae426082"
)
OTHER = PNG[:-4] + b"\x00\x00\x00\x00"  # different bytes, another hash
SHOT = ToolSpec(
    name="browser__shot",
    server="browser",
    tool="shot",
    description="A screenshot",
    parameters={"type": "object", "properties": {}},
)
CALL = '<tool_call>{"name": "browser__shot", "arguments": {}}</tool_call>'


def image(raw: bytes) -> dict[str, str]:
    return {"mimeType": "image/png", "data": base64.b64encode(raw).decode()}


def sha(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def test_the_gateway_passes_on_only_images_whose_data_is_base64() -> None:
    wire = {
        "content": [
            {"type": "image", **image(PNG)},
            {"type": "image", "mimeType": "image/png", "data": "*&^"},
        ]
    }
    text, images, cuts = content_text(wire, ResultCaps(keep_images=True))
    assert images == (image(PNG),) and "[image 1: image/png, attached]" in text
    assert "[image, image/png, not shown: its data is not valid base64]" in text
    assert cuts == [CutRecord(part="image", original_bytes=3, kept_bytes=0)]


class Screens:
    """A tool caller whose screenshots show the same page twice, then another."""

    def __init__(self) -> None:
        self.shots = [[image(PNG)], [image(PNG), image(OTHER)]]

    async def call(self, env_id: str, name: str, arguments: dict[str, Any], timeout_s: float) -> ToolResult:
        images = tuple(self.shots.pop(0))
        return ToolResult(text=f"{len(images)} screenshot(s)", images=images, server="browser", tool="shot")


@pytest.mark.anyio
async def test_an_episode_keeps_each_image_once_and_every_call_its_refs(
    model_dir: Path, tmp_path: Path
) -> None:
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    script = iter([CALL, CALL, "Done."])
    engine = ScriptedEngine(tokenizer, lambda task, conversation: next(script), msgspec.defstruct("T", [])())
    with anyio.fail_after(30):
        t = await run_episode(
            task_id="t1",
            group_id="g1",
            messages=build_messages("Look twice.", [SHOT], None),
            recorder=ChatRecorder(tokenizer),
            engine=engine,
            tools=Screens(),
            env_id="e1",
            sampling=SamplingConfig(temperature=0.0),
            limits=EpisodeLimits(max_turns=3, max_context_tokens=2048),
        )
    first, second = (call.images for call in t.tool_calls)
    assert first == (ImageRef(sha256=sha(PNG), mime_type="image/png", size=len(PNG)),)
    assert second == (first[0], ImageRef(sha256=sha(OTHER), mime_type="image/png", size=len(OTHER)))
    assert t.images == {sha(PNG): image(PNG)["data"], sha(OTHER): image(OTHER)["data"]}

    reporter = Reporter(
        msgspec.convert({"output_dir": str(tmp_path), "wandb": {"mode": "disabled"}}, RunConfig), "r"
    )
    for name in ("a", "b"):  # two files of the same run share the images
        reporter.write_trajectories(name, [t], tokenizer)
    folder = Path(reporter.trajectory_dir) / "images"
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"{sha(b)}.png" for b in (PNG, OTHER))
    assert (folder / f"{sha(OTHER)}.png").read_bytes() == OTHER
    line = (Path(reporter.trajectory_dir) / "a.jsonl").read_text()
    record = json.loads(line)
    assert "images" not in record and image(PNG)["data"] not in line
    assert [i["sha256"] for i in record["tool_calls"][1]["images"]] == [sha(PNG), sha(OTHER)]
