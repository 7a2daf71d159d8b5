"""The gui domain: a warehouse inventory reached through a real headless browser and through its own
MCP tools, in the same episode, scored on the database's end state.

Generator determinism and the task files; the app's rules (``store``) and its web pages over HTTP
(a refused form changes nothing and says why; the change log records which way a change came);
the server's clear exit when its web port is taken; both scripted experts (tool-preferring,
GUI-only) through the real pipeline (EnvPool + McpGateway + Evaluator, @playwright/mcp driving
Debian's chromium) on a task that needs the GUI for one step, on bwrap and docker.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import msgspec
import pytest

from specs.config import load_run_config
from specs.domains.gui import generate
from specs.domains.gui.hooks import seed_sql
from specs.task import TaskSpec, load_tasks
from specs.task_files import render
from tests.backends import REPO, unavailable
from tests.episodes import run_domain

sys.path.insert(0, str(REPO / "specs" / "domains" / "gui" / "servers"))  # the app's stdlib modules
from mcprl_gui.store import Refused, Store  # noqa: E402
from mcprl_gui.web import serve  # noqa: E402

DOMAIN = REPO / "specs" / "domains" / "gui"
CONFIG = REPO / "launch" / "configs" / "gui.yaml"
GUI_PYTHON = REPO / ".cache" / "servers" / "gui" / "bin" / "python"
CHROMIUM = Path("/usr/lib/chromium/chromium")


# --- generator and task files ---------------------------------------------------------------


def test_shipped_task_files_equal_a_fresh_generation() -> None:
    train, evals = generate.generate()
    assert (DOMAIN / "tasks" / "train.json").read_text() == render(train)
    assert (DOMAIN / "tasks" / "eval.json").read_text() == render(evals)


def test_gui_only_families_have_no_tool_that_does_them_and_eval_holds_families_out() -> None:
    train, evals = generate.generate()
    assert {t["_template"] for t in train} == set(generate.TRAIN_FAMILIES)
    assert {t["_template"] for t in evals} - set(generate.TRAIN_FAMILIES) == set(generate.HELDOUT_FAMILIES)
    for t in train + evals:
        assert [s["name"] for s in t["mcp_servers"]] == ["browser", "inventory"], t["instance_id"]
        assert (not t["reference_calls"]) == (t["_template"] in generate.GUI_ONLY), t["instance_id"]


# --- the app: rules and pages ---------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Store:
    import sqlite3

    path = tmp_path / "inventory.db"
    with sqlite3.connect(path) as conn:
        conn.executescript(seed_sql())
    return Store(path)


def changes(store: Store) -> list[tuple[Any, ...]]:
    with store.tx() as conn:
        return [tuple(r) for r in conn.execute("SELECT sku, field, old, new, reason, via FROM changes")]


def test_the_rules_refuse_bad_changes_and_change_nothing(store: Store) -> None:
    tap = store.item("PLU-129")
    for bad, message in (
        (lambda: store.adjust("PLU-129", -(tap["quantity"] + 1), "lost", "api"), "cannot take out"),
        (lambda: store.adjust("PLU-129", "2.5", "delivery", "api"), "whole number"),
        (lambda: store.adjust("PLU-129", 3, " ", "api"), "needs a reason"),
        (lambda: store.move("PLU-129", "Z9", "web"), "no location 'Z9'"),
        (lambda: store.set_price("PLU-129", "-1", "web"), "positive amount"),
        (
            lambda: store.add(
                {
                    "sku": "PLU-129",
                    "name": "x",
                    "category": "y",
                    "location": "A1",
                    "quantity": "1",
                    "price": "1",
                },
                "web",
            ),
            "exists already",
        ),
        (lambda: store.item("NOPE-1"), "no item"),
    ):
        with pytest.raises(Refused, match=message):
            bad()
    assert store.item("PLU-129") == tap and changes(store) == []
    store.adjust("plu-129", 4, "delivery", "api")
    store.set_price("PLU-129", "$2.05", "web")
    assert changes(store) == [
        ("PLU-129", "quantity", str(tap["quantity"]), str(tap["quantity"] + 4), "delivery", "api"),
        ("PLU-129", "price_cents", "120", "205", "", "web"),
    ]


@pytest.fixture
def app(store: Store) -> Iterator[str]:
    httpd = serve(store, "127.0.0.1", 0)
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def fetch(url: str, form: dict[str, str] | None = None) -> tuple[int, str]:
    data = urlencode(form).encode() if form is not None else None
    try:
        with urllib.request.urlopen(url, data=data, timeout=10) as response:  # follows the 303
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_the_web_app_searches_shows_and_changes_an_item_like_the_tools(store: Store, app: str) -> None:
    status, start = fetch(app + "/")
    assert status == 200 and "<label>Search <input name='q'" in start and "Plumbing" in start
    status, found = fetch(app + "/?q=Basin")
    assert status == 200 and "href='/item/PLU-129'>Basin tap</a>" in found and "Claw hammer" not in found
    status, saved = fetch(app + "/item/PLU-129/adjust", {"change": "-3", "reason": "damaged"})
    assert status == 200 and "role='status'>Saved: quantity is now 113" in saved
    status, refused = fetch(app + "/item/PLU-129/move", {"location": "Z9"})
    assert status == 400 and "role='alert'>Error: no location &#x27;Z9&#x27;" in refused
    status, added = fetch(
        app + "/new",
        {
            "sku": "PAI-555",
            "name": "Primer 1L",
            "category": "Paint",
            "location": "c2",
            "quantity": "6",
            "price": "7.25",
        },
    )
    assert status == 200 and "<h1>Primer 1L</h1>" in added and "Saved: added Primer 1L" in added
    assert store.item("PAI-555") == {
        "sku": "PAI-555",
        "name": "Primer 1L",
        "category": "Paint",
        "location": "C2",
        "quantity": 6,
        "price": 7.25,
    }
    assert [(c[0], c[1], c[5]) for c in changes(store)] == [
        ("PLU-129", "quantity", "web"),
        ("PAI-555", "created", "web"),
    ]
    assert fetch(app + "/item/NOPE-1")[0] == 404


def test_the_server_says_when_its_web_port_is_taken(tmp_path: Path) -> None:
    if not GUI_PYTHON.exists():
        unavailable("the gui server venv is missing: python -m launch.server_envs specs/domains/gui")
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [str(GUI_PYTHON), "-m", "mcprl_gui.server", "--db", "x.db", "--ui-port", str(port)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
    assert done.returncode != 0 and f"cannot listen on 127.0.0.1:{port}" in done.stderr, done.stderr


# --- both experts through the real pipeline, a real browser ------------------------------------


def heldout(family: str) -> list[TaskSpec]:
    tasks = load_tasks(DOMAIN / "tasks" / "eval.json")
    return [next(t for t in tasks if t.private["_template"] == family)]


@pytest.fixture
def browser_ready() -> None:
    if not CHROMIUM.exists():
        unavailable("the gui domain needs Debian's chromium: apt-get install chromium")
    if (
        not GUI_PYTHON.exists()
        or not (REPO / ".cache" / "servers" / "browser" / ".requirements.json").exists()
    ):
        unavailable("the gui server envs are missing: python -m launch.server_envs specs/domains/gui")


@pytest.mark.anyio
@pytest.mark.parametrize("backend", ["bwrap", "docker"])
@pytest.mark.parametrize("expert", ["respond", "respond_gui"])
async def test_both_experts_do_a_gui_only_step_and_a_tool_step_on_a_real_browser(
    backend: str, expert: str, tokenizer: Any, monkeypatch: pytest.MonkeyPatch, browser_ready: None
) -> None:
    monkeypatch.chdir(REPO)
    cfg = load_run_config(CONFIG)
    cfg = msgspec.structs.replace(
        cfg, domain=msgspec.structs.replace(cfg.domain, expert=f"specs.domains.gui.expert:{expert}")
    )
    root = Path(tempfile.mkdtemp(prefix="mcprl-gui-"))  # short: chromium's socket path must fit
    try:
        [trajectory] = await run_domain(cfg, heldout("price_and_restock"), backend, root, tokenizer)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert trajectory.status == "ok" and trajectory.succeeded, (trajectory.score, trajectory.final_answer)
    servers = {c.server for c in trajectory.tool_calls}
    assert servers == ({"browser"} if expert == "respond_gui" else {"browser", "inventory"}), servers
    assert all(c.ok for c in trajectory.tool_calls)
    shots = [c for c in trajectory.tool_calls if c.tool == "browser_take_screenshot"]
    refs = [ref for c in shots for ref in c.images]  # kept by hash (rollout.keep_images)
    assert len(shots) >= 2 and len(refs) == len(shots) and {r.mime_type for r in refs} == {"image/png"}
    assert set(trajectory.images) == {r.sha256 for r in refs}  # the bytes once in the trajectory


def test_a_gui_server_the_server_list_lacks_is_refused_at_load(monkeypatch: pytest.MonkeyPatch) -> None:
    from specs.check import load_split
    from specs.errors import SpecError

    monkeypatch.chdir(REPO)
    cfg = load_run_config(CONFIG)
    assert cfg.gui_servers == {"browser"} and load_split(cfg, "eval", 1)["gui"]
    typo = msgspec.structs.replace(cfg, domain=msgspec.structs.replace(cfg.domain, gui_servers=("browsr",)))
    with pytest.raises(SpecError, match=r"domain.gui_servers: \['browsr'\] are not servers of this list"):
        load_split(typo, "eval", 1)


@pytest.mark.anyio
async def test_a_window_on_screenshots_drops_the_old_one_and_the_episode_replays(
    tokenizer: Any, monkeypatch: pytest.MonkeyPatch, browser_ready: None
) -> None:
    """Paper 002's observation rule on real screenshots: with window k = 1 over image observations
    (text never counts as costly here), the GUI expert's first screenshot is replaced by the
    placeholder once the second arrives; the task still succeeds and the logged rule rebuilds the
    recorded tokens exactly."""
    from policies.replay import check_replay
    from policies.tokens import ChatRecorder
    from specs.observation_rule import PLACEHOLDER, ObservationRule

    monkeypatch.chdir(REPO)
    cfg = load_run_config(CONFIG)
    rule = ObservationRule(keep_last_costly=1, costly_chars=10**6)
    cfg = msgspec.structs.replace(
        cfg,
        domain=msgspec.structs.replace(cfg.domain, expert="specs.domains.gui.expert:respond_gui"),
        rollout=msgspec.structs.replace(cfg.rollout, observation_rule=rule),
    )
    task = next(
        t for t in load_tasks(DOMAIN / "tasks" / "train.json") if t.private["_template"] == "set_price"
    )
    root = Path(tempfile.mkdtemp(prefix="mcprl-gui-"))
    try:
        [trajectory] = await run_domain(cfg, [task], "bwrap", root, tokenizer)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert trajectory.status == "ok" and trajectory.succeeded, trajectory.score
    shots = [c for c in trajectory.tool_calls if c.tool == "browser_take_screenshot"]
    assert len(shots) == 2 and all(len(c.images) == 1 for c in shots)
    dropped = [
        r for rec in trajectory.observation_records for r in rec["replaced"] if r["reason"] == "window"
    ]
    assert dropped, trajectory.observation_records
    seen = tokenizer.decode(trajectory.token_ids[trajectory.segment_starts[-1] :])  # the last context
    assert seen.count("[image 1: image/png, attached]") == 1 and PLACEHOLDER in seen
    assert check_replay(trajectory, lambda: ChatRecorder(tokenizer)) is None
