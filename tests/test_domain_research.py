"""The research domain: its generated corpus and tasks, search server, evaluators, judge and expert.

The expert episode runs the production path on bwrap: a real EnvPool, the corpus prepare, the
domain's BM25 server and PyPI's mcp-server-fetch (unchanged) reading pages from the HTTP server
that runs beside it inside the same sandbox, and the evaluator.
"""

from __future__ import annotations

import io
import json
import re
import tarfile
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from actors.env_pool import EnvPool
from actors.evaluator import Evaluator
from actors.mcp_gateway import McpGateway
from actors.rollout import RolloutPipeline, env_config_resolver
from policies.react import EpisodeLimits
from policies.scripted import ScriptedEngine
from policies.tokens import ChatRecorder
from policies.types import SamplingConfig
from specs.check import load_checked_tasks
from specs.domains.research import generate
from specs.domains.research.expert import pick_url, read_relation, respond
from specs.domains.research.hooks import corpus_archive, exact_match, final_answer, normalize
from specs.domains.research.judge import llm_as_judge
from specs.errors import EvaluatorError
from specs.observation_rule import ObservationRule
from specs.servers import load_server_registry
from specs.task import load_tasks
from tests.backends import make_backend, run_id
from tests.factories import answered
from tests.fake_judge import FakeJudge

pytestmark = pytest.mark.anyio
REPO = Path(__file__).resolve().parent.parent
DOMAIN = REPO / "specs" / "domains" / "research"
HOOKS = ("specs.domains.research.hooks", "specs.domains.research.judge")
LIMITS = EpisodeLimits(max_turns=10, max_new_tokens=200, max_context_tokens=12000)
JUDGE_VARS = {"JUDGE_BASE_URL": "http://127.0.0.1:1/v1", "JUDGE_MODEL": "judge"}


async def run_expert(
    tmp_path: Path, tokenizer: Any, tasks: list[Any], backend: str, rule: ObservationRule | None = None
) -> tuple[list[Any], Any]:
    """The expert's episodes through the production pipeline (as tests/test_rollout.py's run_pipeline,
    with the domain's hook modules in the pool and limits that fit four hops), under ``rule`` if given."""
    pool = EnvPool(make_backend(backend, tmp_path / "envs"), run_id(), max_live=2, hook_modules=HOOKS)
    async with McpGateway.running() as gateway:
        pipeline = RolloutPipeline(
            pool=pool,
            gateway=gateway,
            evaluator=Evaluator(HOOKS),
            env_config_for=env_config_resolver(load_server_registry(DOMAIN / "servers.json")),
            engine_for=lambda task: ScriptedEngine(tokenizer, respond, task),
            recorder_factory=lambda: ChatRecorder(tokenizer),
            acquire_workers=1,
            run_workers=2,
            eval_workers=1,
            observation_rule=rule,
        )
        with anyio.fail_after(150):
            groups = await pipeline.collect(tasks, 1, SamplingConfig(temperature=0.0), LIMITS)
    await pool.shutdown()
    return groups, pipeline


def test_the_shipped_corpus_and_tasks_equal_a_fresh_generation(tmp_path: Path) -> None:
    generate.main(["--out", str(tmp_path)])
    for name in ("corpus.json", "tasks/train.json", "tasks/eval.json", "tasks/eval_judged.json"):
        assert (tmp_path / name).read_bytes() == (DOMAIN / name).read_bytes(), name
    assert (DOMAIN / "corpus.json").stat().st_size < 2_000_000


def test_the_task_files_check_and_eval_holds_out_templates() -> None:
    servers = str(DOMAIN / "servers.json")
    train = load_checked_tasks(str(DOMAIN / "tasks" / "train.json"), servers, HOOKS)
    evals = load_checked_tasks(str(DOMAIN / "tasks" / "eval.json"), servers, HOOKS)
    judged = load_tasks(DOMAIN / "tasks" / "eval_judged.json", JUDGE_VARS)
    assert 60 <= len(train) <= 150 and 24 <= len(evals) <= 48 and len(judged) == len(evals)
    assert {t.category for t in train} == {"research/2hop", "research/3hop", "research/4hop"}
    for t in train + evals:
        assert t.category == f"research/{len(t.private['_hops'])}hop"
    seen = {t.private["_template"] for t in train}
    assert set(generate.HELDOUT_TEMPLATES) <= {t.private["_template"] for t in evals} - seen
    assert judged[0].evaluators[0].op_args["base_url"] == JUDGE_VARS["JUDGE_BASE_URL"]


def test_every_hop_of_every_task_is_stated_on_its_entitys_page_once() -> None:
    pages = json.loads((DOMAIN / "corpus.json").read_text())
    by_title = {p.split("<title>")[1].split("</title>")[0]: p for p in pages.values()}
    for t in load_tasks(DOMAIN / "tasks" / "train.json") + load_tasks(DOMAIN / "tasks" / "eval.json"):
        for hop in t.private["_hops"]:
            page = by_title[hop["entity"]].replace("</a>", "")
            text = " ".join(re.sub(r"<[^>]+>", "", page).split())
            assert read_relation(text, hop["relation"], hop["entity"]) == hop["value"], (t.instance_id, hop)


async def test_exact_match_normalises_and_fails_a_wrong_or_missing_answer() -> None:
    assert normalize("  The  Sihaven!") == "sihaven"
    assert final_answer("I think.\nAnswer: x\n**Answer:** The Sihaven.") == "The Sihaven."
    assert final_answer("Final answer: Druwick") == "Druwick" and final_answer("The answer: no") is None

    async def check(text: str, value: Any = "Sihaven") -> Any:
        return await exact_match(None, None, answered(text), value=value)  # type: ignore[arg-type]

    assert (await check("Answer: the sihaven.")).passed
    assert (await check("answer: Druwick", value=["Sihaven", "Druwick"])).passed
    wrong = await check("Answer: Druwick")
    assert not wrong.passed and "'Druwick' does not match 'Sihaven'" in wrong.reason
    missing = await check("It is Sihaven.")
    assert not missing.passed and "no 'Answer: ...' line" in missing.reason


async def test_the_judge_sends_the_hle_prompt_and_reads_both_verdicts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    task = load_tasks(DOMAIN / "tasks" / "eval_judged.json", JUDGE_VARS)[0]
    answer = task.private["_answer"]
    monkeypatch.setenv("JUDGE_API_KEY", "sekret")
    yes = json.dumps(
        {"extracted_final_answer": answer, "reasoning": "same", "correct": "yes", "confidence": 90}
    )
    with FakeJudge([yes, "extracted_final_answer: Nowhere\ncorrect: no"]) as judge:
        args = {**task.evaluators[0].op_args, "base_url": judge.base_url}
        passed = await llm_as_judge(None, task, answered(f"Answer: {answer}"), **args)  # type: ignore[arg-type]
        failed = await llm_as_judge(None, task, answered("Answer: Nowhere"), **args)  # type: ignore[arg-type]
    assert passed.passed and not failed.passed and "not equal to" in failed.reason
    path, headers, body = judge.requests[0]
    assert path == "/v1/chat/completions" and headers["Authorization"] == "Bearer sekret"
    assert body["model"] == "judge" and body["temperature"] == 0.0
    prompt = body["messages"][0]["content"]
    assert f"[question]: {task.instruction}" in prompt and f"[correct_answer]: {answer}" in prompt
    assert f"[response]: Answer: {answer}" in prompt


async def test_a_judge_that_answers_nonsense_or_fails_is_an_evaluator_error() -> None:
    task = load_tasks(DOMAIN / "tasks" / "eval_judged.json", JUDGE_VARS)[0]
    for replies, expected in (
        ([500, 500], "failed 2 times"),
        (["I like turtles"], "no 'correct: yes|no'"),
        ([401], "status 401"),
    ):
        with FakeJudge(replies) as judge:
            args = {**task.evaluators[0].op_args, "base_url": judge.base_url, "retries": 1}
            with pytest.raises(EvaluatorError, match=expected):
                await llm_as_judge(None, task, answered("Answer: x"), **args)  # type: ignore[arg-type]
    with pytest.raises(EvaluatorError, match="not filled"):
        await llm_as_judge(
            None,
            task,
            answered("Answer: x"),
            **{
                **task.evaluators[0].op_args,  # type: ignore[arg-type]
                "base_url": "{{JUDGE_BASE_URL}}",
            },
        )


async def test_bm25_search_ranks_the_named_page_first_above_its_near_duplicate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    with tarfile.open(fileobj=io.BytesIO(corpus_archive())) as tar:
        tar.extractall(tmp_path, filter="data")
    pages = json.loads((DOMAIN / "corpus.json").read_text())
    twin = next(p for p in pages.values() if "Not to be confused with" in p)
    name = twin.split("<title>")[1].split("</title>")[0]
    other = twin.split("Not to be confused with ")[1].split(">")[1].split("<")[0]
    entry = json.loads((DOMAIN / "servers.json").read_text())["research_search"]["stdio"]
    params = StdioServerParameters(
        command=str(REPO / entry["command"]), args=entry["args"], cwd=str(tmp_path)
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        result = await session.call_tool("search", {"query": name, "k": 5})
    text = result.content[0].text  # type: ignore[union-attr]
    assert text.startswith(f"[1] {name}\nURL: http://127.0.0.1:8765/wiki/") and other in text
    assert pick_url(text, name) != pick_url(text, other)


async def test_bm25_search_lists_tied_pages_in_path_order_on_any_cpu(tmp_path: Path) -> None:
    """bm25s's own top-k ordered equal scores by its (CPU-dependent) sort: this machine listed the
    last five of twelve tied pages, backwards, and another listed others, so a recorded episode
    did not replay there. Ties go by page path."""
    (tmp_path / "site").mkdir()
    for i in reversed(range(12)):
        (tmp_path / "site" / f"p{i:02d}.html").write_text(f"<title>Page{i:02d}</title><p>zeta filler</p>")
    entry = json.loads((DOMAIN / "servers.json").read_text())["research_search"]["stdio"]
    params = StdioServerParameters(
        command=str(REPO / entry["command"]), args=entry["args"], cwd=str(tmp_path)
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        result = await session.call_tool("search", {"query": "zeta", "k": 5})
    text = result.content[0].text  # type: ignore[union-attr]
    assert re.findall(r"\] (Page\d+)", text) == ["Page00", "Page01", "Page02", "Page03", "Page04"]


async def test_the_expert_solves_a_4hop_task_on_bwrap_reading_pages_through_the_real_fetch_server(
    tmp_path: Path, tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    tasks = [t for t in load_tasks(DOMAIN / "tasks" / "eval.json") if t.category == "research/4hop"][:1]
    groups, pipeline = await run_expert(tmp_path, tokenizer, tasks, "bwrap")
    (trajectory,) = groups[0].trajectories
    assert trajectory.succeeded, (trajectory.error, trajectory.final_answer)
    assert [c.name for c in trajectory.tool_calls] == ["research_search__search", "fetch__fetch"] * 4
    assert all(c.ok for c in trajectory.tool_calls)
    fetched = [
        m["content"] for m in trajectory.messages if "Contents of http://127.0.0.1:8765/wiki/" in str(m)
    ]
    assert len(fetched) == 4 and f"Answer: {tasks[0].private['_answer']}" in (trajectory.final_answer or "")
    assert msgspec.json.encode(trajectory.score)
    assert pipeline.metrics.lost == {}


async def test_the_expert_demonstrates_under_an_observation_rule_that_elides_its_older_search_results(
    tmp_path: Path, tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The observation_rule ablation's matched arm warm-starts on demonstrations run under the rule
    (search results ~1400 characters are costly at 1000; the 500-character pages are not)."""
    monkeypatch.chdir(REPO)
    tasks = [t for t in load_tasks(DOMAIN / "tasks" / "eval.json") if t.category == "research/4hop"][:1]
    rule = ObservationRule(keep_last_costly=1, costly_chars=1000)
    groups, _ = await run_expert(tmp_path, tokenizer, tasks, "bwrap", rule)
    (trajectory,) = groups[0].trajectories
    assert trajectory.succeeded, (trajectory.error, trajectory.final_answer)
    assert [c.name for c in trajectory.tool_calls] == ["research_search__search", "fetch__fetch"] * 4
    last = trajectory.observation_records[-1]  # the context of the last turn: the 3 older searches elided
    assert [r["reason"] for r in last["replaced"]] == ["window"] * 3, last


def test_the_recorded_expert_episode_read_its_pages_from_the_http_server_inside_the_environment() -> None:
    """The fixture tests/test_recorded_episodes.py replays is a real research episode."""
    from tests.episodes import load

    recording = load(REPO / "tests" / "data" / "episodes" / "research-eval-seen-0000.json")
    trajectory = recording.trajectory
    assert recording.config == "launch/configs/research.yaml" and recording.backend == "bwrap"
    assert trajectory.score is not None and trajectory.score.success
    assert [c.name for c in trajectory.tool_calls] == ["research_search__search", "fetch__fetch"] * 2
    pages = [m["content"] for m in trajectory.messages if "Contents of http://127.0.0.1:8765/wiki/" in str(m)]
    assert len(pages) == 2
