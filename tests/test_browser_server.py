"""A real headless browser as a third-party MCP server, inside an environment of each sandboxing
backend: ``@playwright/mcp`` from npm, unchanged (``tests/servers/thirdparty``, an npm prefix built
by ``make servers``), driving Debian's chromium. Through the gateway: a page is opened, read as an
accessibility snapshot, typed into and clicked by the snapshot's element refs, and photographed;
the screenshot comes back as an MCP image, kept for a multimodal model (``keep_images``) as a PNG of
the viewport's size. Nothing of the environment is left afterwards. On every backend, local
(development only), bwrap and docker, with no network but the environment's own loopback.
"""

from __future__ import annotations

import base64
import re
import shutil
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import anyio
import pytest

from actors.mcp_gateway import McpGateway
from actors.provisioners.base import Provisioner
from policies.types import ToolResult
from specs.env import EnvConfig
from specs.servers import load_server_registry
from tests.backends import REPO, cmdlines, gone, make_backend, marked, run_id, unavailable

pytestmark = pytest.mark.anyio
CHROMIUM = Path("/usr/lib/chromium/chromium")
PAGE = """<title>Inventory</title><h1>Inventory</h1>
<label>Item <input id="item"></label><button onclick="add()">Add</button><ul id="items"></ul>
<script>function add() { const li = document.createElement('li');
li.textContent = document.getElementById('item').value; document.getElementById('items').append(li);
document.title = 'Inventory (1)'; }</script>"""


@pytest.fixture(params=("local", "bwrap", "docker"))
def provisioner(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Provisioner]:
    monkeypatch.chdir(REPO)  # the registry names the server's npm prefix relative to the project root
    if not CHROMIUM.exists():
        unavailable("the browser server needs Debian's chromium: apt-get install chromium")
    if not (REPO / ".cache" / "servers" / "browser" / ".requirements.json").exists():
        unavailable("the browser server's npm prefix is missing: run `make servers`")
    # a short root: chromium's singleton socket lives in TMPDIR (the local backend's is in the env's
    # directory) and a socket path must fit in 108 bytes, which pytest's tmp_path does not
    root = Path(tempfile.mkdtemp(prefix="mcprl-browser-"))
    yield make_backend(str(request.param), root)
    shutil.rmtree(root, ignore_errors=True)


def ref(snapshot: str, role: str, name: str) -> str:
    """The element ref of ``role "name"`` in an accessibility snapshot."""
    found = re.search(rf'{role} "{name}"[^\n]*\[ref=(\w+)\]', snapshot)
    assert found, f'no {role} "{name}" in the snapshot:\n{snapshot}'
    return found.group(1)


def ok(result: ToolResult) -> str:
    assert not result.is_error, result.text
    return result.text


def png_size(data: str) -> tuple[int, int]:
    raw = base64.b64decode(data)
    assert raw[:8] == b"\x89PNG\r\n\x1a\n" and raw[12:16] == b"IHDR", raw[:16]
    width, height = struct.unpack(">II", raw[16:24])
    return width, height


async def test_a_headless_browser_reads_types_clicks_and_sends_a_screenshot_as_an_image(
    provisioner: Provisioner,
) -> None:
    launch = load_server_registry(REPO / "tests" / "servers" / "thirdparty" / "servers.json").launch(
        "browser"
    )
    with anyio.fail_after(180):
        env = await provisioner.create(EnvConfig(servers=(launch,)), run_id())
        try:
            async with McpGateway.running(provisioner_for=lambda _: provisioner, keep_images=True) as gateway:
                specs = await gateway.open(env, [launch])
                assert {"browser__browser_navigate", "browser__browser_take_screenshot"} <= {
                    s.name for s in specs
                }

                async def call(tool: str, **arguments: object) -> ToolResult:
                    return await gateway.call(env.env_id, f"browser__{tool}", dict(arguments), 60.0)

                ok(await call("browser_navigate", url="data:text/html," + quote(PAGE)))
                page = ok(await call("browser_snapshot"))
                assert 'heading "Inventory"' in page
                ok(
                    await call(
                        "browser_type", element="Item", target=ref(page, "textbox", "Item"), text="Widget"
                    )
                )
                ok(await call("browser_click", element="Add", target=ref(page, "button", "Add")))
                after = ok(await call("browser_snapshot"))
                assert "Page Title: Inventory (1)" in after and re.search(
                    r"listitem \[ref=\w+\]: Widget", after
                ), after

                shot = await call("browser_take_screenshot", type="png", scale="css")
                assert "[image 1: image/png, attached]" in ok(shot)
                (image,) = shot.images
                assert image["mimeType"] == "image/png" and png_size(image["data"]) == (640, 480)

                assert marked(env.env_id), "the browser's processes are seen from the host"
                await gateway.close(env.env_id)
                assert await gone(env.env_id), cmdlines(marked(env.env_id))
        finally:
            with anyio.CancelScope(shield=True):
                await provisioner.destroy(env)
    assert marked(env.env_id) == [] and await provisioner.list_owned(env.run_id) == []
