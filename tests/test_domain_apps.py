"""The apps domain: a shop and a bank as MCP servers over SQLite, scored on the databases' end state.

Generator determinism and the task files' validity; the servers' business rules through a real MCP
client over stdio (the servers' own venv); the seed prepare, a reset restoring it; the SQL verifier
on an environment whose state was not reached and on one where it was; the scripted expert through
the real pipeline (EnvPool + McpGateway + Evaluator), two servers in one episode, on bwrap.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from actors.env_pool import EnvPool
from specs.config import load_run_config
from specs.domains.apps import generate
from specs.domains.apps.hooks import seed_db, seed_sql, sql_state
from specs.env import EnvConfig, EnvHandle
from specs.task import TaskSpec, load_tasks
from specs.task_files import render
from tests.backends import make_backend, run_id
from tests.episodes import run_domain

pytestmark = pytest.mark.anyio
REPO = Path(__file__).resolve().parent.parent
DOMAIN = REPO / "specs" / "domains" / "apps"
HOOKS = ("specs.domains.apps.hooks",)
CONFIG = REPO / "launch" / "configs" / "apps.yaml"
NO_TRAJECTORY: Any = None  # apps.sql_state reads the environment, not the trajectory
APPS_PYTHON = REPO / ".cache" / "servers" / "apps" / "bin" / "python"
needs_servers = pytest.mark.skipif(
    not APPS_PYTHON.exists(),
    reason="apps server venv missing: python -m launch.server_envs specs/domains/apps",
)


def task(instance_id: str, split: str = "train") -> TaskSpec:
    return next(t for t in load_tasks(DOMAIN / "tasks" / f"{split}.json") if t.instance_id == instance_id)


# --- generator and task files ---------------------------------------------------------------


def test_shipped_task_files_equal_a_fresh_generation() -> None:
    files = generate.task_files()
    assert sorted(files) == sorted(p.name for p in (DOMAIN / "tasks").glob("*.json"))
    for name, tasks in files.items():
        assert (DOMAIN / "tasks" / name).read_text() == render(tasks), name
    train, evals = generate.generate()
    assert 60 <= len(train) <= 150 and 24 <= len(evals) <= 48


def test_the_wide_eval_is_the_eval_with_four_draws_of_each_seen_family() -> None:
    files = generate.task_files()
    evals, wide = files["eval.json"], files["eval_wide.json"]
    assert [t for t in wide if t in evals] == evals  # the same tasks, in the same order
    seen = [t for t in wide if "-eval-seen-" in t["instance_id"]]
    assert Counter(t["_template"] for t in seen) == dict.fromkeys(generate.TRAIN_FAMILIES, 4)
    assert [t["instance_id"] for t in seen] == [f"apps-eval-seen-{i:04d}" for i in range(48)]
    instructions = [t["instruction"] for t in files["train.json"] + wide]
    assert len(instructions) == len(set(instructions))


def test_eval_holds_out_families_and_no_instruction_repeats() -> None:
    train, evals = generate.generate()
    train_families = {t["_template"] for t in train}
    assert train_families == set(generate.TRAIN_FAMILIES)
    heldout = {t["_template"] for t in evals} - train_families
    assert heldout == set(generate.HELDOUT_FAMILIES)
    instructions = [t["instruction"] for t in train + evals]
    assert len(instructions) == len(set(instructions))
    two_server = [t for t in train if {"shop", "bank"} <= {s["name"] for s in t["mcp_servers"]}]
    via_sql = [t for t in train if any(s["name"].endswith("_sql") for s in t["mcp_servers"])]
    assert two_server and via_sql
    assert all(any(e["op"] == "apps.sql_state" for e in t["evaluators"]) for t in train + evals)


# --- the servers' business rules, through a real MCP client ---------------------------------


async def call_tools(
    db_dir: Path, module: str, db: str, calls: list[tuple[str, dict[str, Any]]]
) -> list[Any]:
    """Start ``module`` on ``db`` (in ``db_dir``) over stdio and make ``calls``: (is_error, payload) each."""
    params = StdioServerParameters(command=str(APPS_PYTHON), args=["-m", module, "--db", db], cwd=str(db_dir))
    out: list[Any] = []
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = {t.name: t for t in (await session.list_tools()).tools}
        out.append(tools)
        for name, args in calls:
            result = await session.call_tool(name, args)
            text = "\n".join(getattr(c, "text", "") for c in result.content)
            out.append((result.is_error, text if result.is_error else json.loads(text)))
    return out


def seeded(tmp_path: Path, name: str) -> Path:
    import sqlite3

    conn = sqlite3.connect(tmp_path / f"{name}.db")
    conn.executescript(seed_sql(name))
    conn.close()
    return tmp_path


@needs_servers
async def test_the_bank_refuses_overdrafts_and_unknown_payees_and_moves_money_otherwise(
    tmp_path: Path,
) -> None:
    tools, *results = await call_tools(
        seeded(tmp_path, "bank"),
        "mcprl_apps.bank",
        "bank.db",
        [
            ("transfer", {"from_account_id": "CHK-4001", "to_account_id": "SAV-5001", "amount": 1_000_000}),
            ("pay_bill", {"account_id": "CHK-4001", "payee": "Nobody Inc", "amount": 10}),
            ("transfer", {"from_account_id": "CHK-4001", "to_account_id": "SAV-5002", "amount": 10}),
            ("transfer", {"from_account_id": "CHK-4001", "to_account_id": "SAV-5001", "amount": 10.5}),
            (
                "receive_refund",
                {"account_id": "CHK-4001", "merchant": "ShopCo", "amount": 5, "reference": "RF-1"},
            ),
            (
                "receive_refund",
                {"account_id": "CHK-4001", "merchant": "ShopCo", "amount": 5, "reference": "RF-1"},
            ),
            ("get_balance", {"account_id": "CHK-4001"}),
        ],
    )
    assert tools["get_balance"].annotations.read_only_hint is True
    assert tools["transfer"].annotations.read_only_hint is False
    (e1, m1), (e2, m2), (e3, m3), (e4, r4), (e5, _), (e6, m6), (_, bal) = results
    assert e1 and "insufficient funds in CHK-4001" in m1
    assert e2 and "not a registered payee" in m2
    assert e3 and "different holders" in m3
    assert not e4 and r4["balances"] == {"CHK-4001": 383.53, "SAV-5001": 454.76}
    assert not e5 and e6 and "already credited" in m6
    assert bal["balance"] == 388.53  # 394.03 - 10.50 + 5: the refused calls changed nothing


@needs_servers
async def test_the_shop_checks_stock_status_and_payment_amounts(tmp_path: Path) -> None:
    _, *results = await call_tools(
        seeded(tmp_path, "shop"),
        "mcprl_apps.shop",
        "shop.db",
        [
            ("place_order", {"customer_id": "C101", "items": [{"product_id": "P205", "quantity": 1}]}),
            ("place_order", {"customer_id": "C101", "items": [{"product_id": "P201", "quantity": 2}]}),
            ("cancel_order", {"order_id": 1001}),
            ("confirm_payment", {"order_id": 1030, "amount": 1.0, "bank_transaction_id": 7}),
            ("apply_coupon", {"order_id": 1030, "code": "WINTER20"}),
            ("cancel_order", {"order_id": 1030}),
            ("get_product", {"product_id": "P201"}),
        ],
    )
    (e1, m1), (e2, order), (e3, m3), (e4, m4), (e5, m5), (e6, cancelled), (_, product) = results
    assert e1 and "only 0 in stock" in m1
    assert (
        not e2
        and order["order_id"] == 1030
        and order["total"] == 13.98
        and order["status"] == "pending_payment"
    )
    assert e3 and "delivered and can no longer be cancelled" in m3
    assert e4 and "amount due is 13.98" in m4
    assert e5 and "is not valid" in m5
    assert not e6 and cancelled["status"] == "cancelled" and cancelled["refund_amount"] == 0
    assert product["stock"] == 40  # taken by the order, returned by the cancel


# --- prepare, reset, verifier ---------------------------------------------------------------


async def test_the_sql_verifier_fails_on_an_unreached_state_and_passes_once_it_is_reached(
    tmp_path: Path,
) -> None:
    t = task("apps-train-0000")  # a transfer: balances and two ledger rows
    provisioner = make_backend("bwrap", tmp_path / "envs")
    env = await provisioner.create(EnvConfig(), run_id())
    try:
        handle = EnvHandle(env, provisioner)
        await seed_db(handle, t, **t.prepares[0].prepare_args)
        check = next(e for e in t.evaluators if "balance_cents" in e.op_args["query"])
        broken = await sql_state(handle, t, NO_TRAJECTORY, check.value, **check.op_args)
        assert not broken.passed
        assert f"expected {check.value}" in broken.reason and "got [[" in broken.reason
        (a, a_bal), (b, b_bal) = check.value
        fix = f"UPDATE accounts SET balance_cents = CASE id WHEN '{a}' THEN {a_bal} ELSE {b_bal} END WHERE id IN ('{a}', '{b}')"
        script = f"import sqlite3; c = sqlite3.connect('bank.db'); c.execute({fix!r}); c.commit()"
        assert (await handle.run(["/usr/bin/python3", "-c", script])).returncode == 0
        fixed = await sql_state(handle, t, NO_TRAJECTORY, check.value, **check.op_args)
        assert fixed.passed, fixed.reason
    finally:
        await provisioner.destroy(env)


async def test_a_reset_environment_gets_the_seeded_database_back(tmp_path: Path) -> None:
    t = task("apps-train-0000")
    pool = EnvPool(make_backend("bwrap", tmp_path / "envs"), run_id(), max_live=1, hook_modules=HOOKS)
    config = EnvConfig()
    count = "SELECT COUNT(*), SUM(balance_cents) FROM accounts"
    env = await pool.acquire(config, t)
    handle = EnvHandle(env, pool.provisioner)
    seed = await _rows(handle, count)
    wipe = "import sqlite3; c = sqlite3.connect('bank.db'); c.execute('DELETE FROM accounts'); c.commit()"
    assert (await handle.run(["/usr/bin/python3", "-c", wipe])).returncode == 0
    assert await _rows(handle, count) == [[0, None]]
    await pool.release(env, t)
    again = await pool.acquire(config, t)
    assert again.env_id == env.env_id  # the same environment, reset and prepared again
    assert await _rows(EnvHandle(again, pool.provisioner), count) == seed == [[20, seed[0][1]]]
    await pool.release(again, t)
    await pool.shutdown()


async def _rows(handle: EnvHandle, query: str) -> Any:
    from specs.domains.apps.hooks import query_rows

    return await query_rows(handle, "bank.db", query)


# --- the expert through the real pipeline ---------------------------------------------------


@needs_servers
async def test_the_expert_pays_an_order_across_shop_and_bank_on_bwrap(
    tmp_path: Path, tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    tasks = [t for t in load_tasks(DOMAIN / "tasks" / "train.json") if t.private["_template"] == "pay_order"][
        :1
    ]
    [trajectory] = await run_domain(load_run_config(CONFIG), tasks, "bwrap", tmp_path / "envs", tokenizer)
    assert trajectory.status == "ok" and trajectory.succeeded, trajectory.score
    servers = [c.server for c in trajectory.tool_calls]
    assert {"shop", "bank"} <= set(servers) and all(c.ok for c in trajectory.tool_calls)
