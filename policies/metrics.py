"""Episode metrics: what a user watches to see whether the agent learns to use its tools.

Notation. A batch holds the *scored* episodes ``τ_1 .. τ_n`` (status ``ok``, ``Score`` set; failed
ones are counted by the pipeline, never here), grouped into the tasks ``x`` they sampled
(``task_id``; ``J`` tasks, ``n_x`` episodes of task ``x``). For an episode ``τ``: ``r`` its task
reward (``Score.task``), ``s`` its success (``Score.success``: every evaluator passed),
``C`` its tool-call log (a call ``c`` has a ``turn``, ``ok`` and an ``error_kind``), ``T`` its
model turns, ``a`` its final answer (``None`` when it ended without one), ``m`` and ``ρ`` its
trainable (sampled) and reasoning masks.

Per-episode means, ``M = (1/n) Σ_τ v(τ)``, with ``v(τ)`` =

- ``success``: ``1[s]``; ``reward``: ``r``.
- ``tool_reward``, ``reasoning_reward``: ``Score.tool`` and ``Score.reasoning``, the MCPDisCo reward
  families, present only when every scored episode has them (a family switched off is absent, not 0).
- ``tool_calls``: ``|C|``, tool-calling steps per trajectory: paper 000's "Avg. Chain" (§4.1).
- ``tool_adoption``: ``1[∃ c ∈ C: ok(c)]``, at least one call that succeeded.
- ``valid_call``: the first turn is a well-formed call of a real tool with valid arguments (the
  tool ran, successfully or with a tool-level error).
- ``turns``: ``T``; ``gen_tokens``: ``Σ m``.
- ``reasoning_tokens``: ``Σ ρ``, the Thought-MDP reasoning span: paper 000's "Avg. CoT Tokens"
  (§4.1); 0 for an agent that does not reason explicitly (empty mask).
- ``false_success``: ``1[a ≠ None ∧ ¬s]``: the agent *terminated* with a final answer, i.e.
  declared the task done, and the evaluator says it failed: paper 002's "false-success rate"
  (Table 3) per episode. An episode cut by the turn or context limit (``a = None``, truncated)
  never claimed to be done and is not a false success.
- ``hallucinated_tools``: ``|{c ∈ C: error_kind(c) = unknown_tool}|``, calls of a tool name that
  does not exist: paper 002's "hallucinated tool names" (Table 3), as a count per episode.
- ``truncated``: ``1[a = None]``: cut by the turn or context limit before a final answer; a
  policy that learns not to stop shows here first (BENCHMARKS.md, apps at lr 5e-6: 0.06 of the
  sampled episodes at step 1, 0.97 at step 4).
- ``unparsed_calls``: ``|{c ∈ C: error_kind(c) = parse_error}|``, calls whose text is not a
  readable call (bad JSON, no name): the first sign of a policy losing the call format under RL
  (BENCHMARKS.md, apps at 8 tasks a step, seed 1: 0.2 a sampled episode at step 1, 3.5 at step 4).
- ``input_tokens``: ``Σ_t |C_t|``, the tokens the model read as input over all its turns, with
  ``|C_t|`` the length of the prompt turn ``t`` was sampled on: paper 002's "cumulative input"
  (Table 2, token block). See ``turn_input_tokens`` for how ``|C_t|`` is read off the recording.

Pooled over turns (paper 002's TIR, Table 3: "MCP steps / total steps"):

- ``tool_step_share = Σ_τ |{turn(c) : c ∈ C(τ)}| / Σ_τ T(τ)``: the share of model turns whose
  output holds a tool call, well-formed or not (a malformed or hallucinated call is still the
  decision to call a tool); 0 when no episode has a turn.

Task level (paper 002, Table 3, "Adoption, task-level", 55/309):

- ``task_adoption = |{x : ∃ τ of x, ∃ c ∈ C(τ): ok(c)}| / J``: the share of *tasks* with at least
  one episode whose tool call succeeded. (The paper counts a task that *invokes* a tool; we ask
  for a call that ran, so a hallucinated name does not count as adoption.) Equal to
  ``tool_adoption`` with one episode per task; above it with ``K`` samples per task.

Hybrid GUI + MCP agents (paper 002; ``G``, the run's GUI servers, ``domain.gui_servers``: the
browser through which the agent clicks and types is an MCP server too, but its calls are GUI actions,
not tool use). With ``G`` given, a call ``c`` with ``server(c) ∈ G`` is a GUI action: it never counts
toward ``tool_adoption`` or ``task_adoption``, ``tool_step_share`` counts the turns with a call
outside ``G`` (paper 002's TIR: MCP steps over all steps), and

- ``gui_step_share = Σ_τ |{turn(c) : c ∈ C(τ), server(c) ∈ G}| / Σ_τ T(τ)``: the turns spent on the
  GUI; ``1 - tool_step_share - gui_step_share`` is the share of turns with no action (the answer).
- ``reachable_adoption``: ``task_adoption`` over the tool-reachable tasks only (``reachable``: a map
  ``task_id -> bool``, a task with reference calls; paper 002's "23.9% of the tool-reachable ones"),
  absent where a row has none.

Plus the counts ``episodes = n`` and ``tasks = J``.

Standard errors (``metrics_with_stderr``): clustered by task, ``policies.stats``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from policies.stats import mean_and_stderr, ratio_and_stderr
from specs.trajectory import Score, ToolCallRecord, Trajectory

BUILTIN_SERVER = "mcprl"
"""The server name of the gateway's built-in tools (``route``), which no MCP server runs."""
MALFORMED = frozenset({"parse_error", "unknown_tool", "bad_arguments"})
OVERALL = "all"
"""The key of the row over every episode in ``metrics_with_stderr``."""


def turn_input_tokens(t: Trajectory) -> list[int]:
    """``|C_t|`` for each model turn ``t`` of a recorded trajectory, in order.

    A model turn is a maximal run of trainable tokens (two turns are always separated by the
    untrainable delta of the messages that came between them); it starts at position ``s_t``. The
    model was given the *current rendering segment* up to ``s_t``: a segment restart (the recorder
    re-encoding a rewritten context, ``segment_starts``) replaces the whole context, and later turns
    read only the new segment. So ``|C_t| = s_t − b(s_t)``, ``b(s) = max{b ∈ segment_starts : b ≤ s}``;
    without a restart, ``|C_t| = s_t``. Example: ``trainable = [0,0,1,1,0,0,0,1]``,
    ``segment_starts = [0, 4]`` -> turns start at 2 and 7 -> ``[2 - 0, 7 - 4] = [2, 3]``. A turn
    that sampled no token leaves no trace in the recording and is not counted.
    """
    starts = sorted(t.segment_starts) or [0]
    out: list[int] = []
    segment = 0
    for i, flag in enumerate(t.trainable):
        if flag and (i == 0 or not t.trainable[i - 1]):
            while segment + 1 < len(starts) and starts[segment + 1] <= i:
                segment += 1
            out.append(i - starts[segment])
    return out


def _adopted(call: ToolCallRecord, gui: frozenset[str] = frozenset()) -> bool:
    """A call that ran an MCP server's tool successfully (the gateway's own ``route`` and a GUI
    server's actions do not count)."""
    return call.ok and call.server != BUILTIN_SERVER and call.server not in gui


def _first_turn_valid(t: Trajectory) -> bool:
    first = [c for c in t.tool_calls if c.turn == 1]
    return bool(first) and first[0].error_kind not in MALFORMED


def _turns_with(t: Trajectory, gui: frozenset[str], on_gui: bool) -> float:
    """The turns of ``t`` with a call on a GUI server (``on_gui``) or elsewhere (a malformed call too)."""
    return float(len({c.turn for c in t.tool_calls if (c.server in gui) == on_gui}))


PER_EPISODE: dict[str, Callable[[Trajectory], float]] = {
    "success": lambda t: 1.0 if _score(t).success else 0.0,
    "reward": lambda t: _score(t).task,
    "tool_calls": lambda t: float(len(t.tool_calls)),
    "valid_call": lambda t: 1.0 if _first_turn_valid(t) else 0.0,
    "turns": lambda t: float(t.num_turns),
    "gen_tokens": lambda t: float(t.num_generated_tokens),
    "reasoning_tokens": lambda t: float(t.num_reasoning_tokens),
    "false_success": lambda t: 1.0 if t.final_answer is not None and not _score(t).success else 0.0,
    "hallucinated_tools": lambda t: float(sum(c.error_kind == "unknown_tool" for c in t.tool_calls)),
    "unparsed_calls": lambda t: float(sum(c.error_kind == "parse_error" for c in t.tool_calls)),
    "truncated": lambda t: 1.0 if t.truncated else 0.0,
    "input_tokens": lambda t: float(sum(turn_input_tokens(t))),
}
"""Metric name -> its per-episode value ``v(τ)``; the metric is the mean over episodes (with
``tool_adoption``, which depends on the GUI servers: ``per_episode``)."""


def per_episode(gui: frozenset[str] = frozenset()) -> dict[str, Callable[[Trajectory], float]]:
    """``PER_EPISODE`` and ``tool_adoption``, whose calls on the GUI servers ``gui`` do not count."""
    return {
        **PER_EPISODE,
        "tool_adoption": lambda t: 1.0 if any(_adopted(c, gui) for c in t.tool_calls) else 0.0,
    }


FAMILIES: dict[str, Callable[[Score], float | None]] = {
    "tool_reward": lambda s: s.tool,
    "reasoning_reward": lambda s: s.reasoning,
}
"""Optional reward families: a metric only when every scored episode has the family."""


def _score(t: Trajectory) -> Score:
    assert t.score is not None, "metrics read scored trajectories only (_scored)"
    return t.score


def _scored(trajectories: Iterable[Trajectory]) -> list[Trajectory]:
    return [t for t in trajectories if t.status == "ok" and t.score is not None]


def _with_stderr(
    scored: Sequence[Trajectory], gui: frozenset[str], reachable: Mapping[str, bool] | None = None
) -> dict[str, tuple[float, float]]:
    """Every metric of ``scored`` (non-empty) as ``(mean, stderr)``, clustered by task."""
    by_task: dict[str, list[Trajectory]] = {}
    for t in scored:
        by_task.setdefault(t.task_id, []).append(t)
    tasks = list(by_task.values())
    sizes = [float(len(group)) for group in tasks]
    out = {"episodes": (float(len(scored)), 0.0), "tasks": (float(len(tasks)), 0.0)}
    for name, value in per_episode(gui).items():
        out[name] = ratio_and_stderr([sum(value(t) for t in group) for group in tasks], sizes)
    for name, family in FAMILIES.items():
        values = [[family(_score(t)) for t in group] for group in tasks]
        if all(v is not None for vs in values for v in vs):
            out[name] = ratio_and_stderr([sum(v for v in vs if v is not None) for vs in values], sizes)
    turns = [float(sum(t.num_turns for t in group)) for group in tasks]
    out["tool_step_share"] = ratio_and_stderr(
        [sum(_turns_with(t, gui, on_gui=False) for t in group) for group in tasks], turns
    )
    if gui:
        out["gui_step_share"] = ratio_and_stderr(
            [sum(_turns_with(t, gui, on_gui=True) for t in group) for group in tasks], turns
        )
    adopted = {
        group[0].task_id: any(_adopted(c, gui) for t in group for c in t.tool_calls) for group in tasks
    }
    out["task_adoption"] = mean_and_stderr(1.0 if a else 0.0 for a in adopted.values())
    if reachable is not None and any(reachable.get(task, False) for task in adopted):
        out["reachable_adoption"] = mean_and_stderr(
            1.0 if a else 0.0 for task, a in adopted.items() if reachable.get(task, False)
        )
    return out


def metrics_with_stderr(
    trajectories: Sequence[Trajectory],
    by: Mapping[str, str] | None = None,
    gui_servers: Iterable[str] = (),
    reachable: Mapping[str, bool] | None = None,
) -> dict[str, dict[str, tuple[float, float]]]:
    """``{row: {metric: (mean, stderr)}}``: the row ``"all"`` over every scored episode, then (with
    ``by``, a map ``task_id -> domain``) one row per domain, sorted. With no scored episode the
    ``"all"`` row is ``{"episodes": (0, 0)}`` and there are no domain rows."""
    scored = _scored(trajectories)
    if not scored:
        return {OVERALL: {"episodes": (0.0, 0.0)}}
    gui = frozenset(gui_servers)
    rows = {OVERALL: _with_stderr(scored, gui, reachable)}
    if by is None:
        return rows
    domains: dict[str, list[Trajectory]] = {}
    for t in scored:
        if t.task_id not in by:
            raise ValueError(f"metrics_with_stderr: task {t.task_id!r} has no domain in `by`")
        domain = by[t.task_id]
        if domain == OVERALL:
            raise ValueError(
                f"metrics_with_stderr: task {t.task_id!r} has domain {OVERALL!r}, which names the overall row"
            )
        domains.setdefault(domain, []).append(t)
    rows.update((d, _with_stderr(domains[d], gui, reachable)) for d in sorted(domains))
    return rows


def episode_metrics(
    trajectories: Sequence[Trajectory],
    prefix: str = "",
    gui_servers: Iterable[str] = (),
    reachable: Mapping[str, bool] | None = None,
) -> dict[str, float]:
    """The means of ``metrics_with_stderr`` over every scored episode, keys prefixed by ``prefix``."""
    overall = metrics_with_stderr(trajectories, gui_servers=gui_servers, reachable=reachable)[OVERALL]
    return {f"{prefix}{k}": mean for k, (mean, _) in overall.items()}
