"""The physical limit of a rollout workload: the most generated tokens per second an orchestrator
could get out of this engine, these environments and these worker counts. Pure; no I/O.

Symbols (fields of ``Workload``):

    T    turns per episode; the first T-1 end in a tool call, the last is the final answer
    N    generated tokens per turn;  D = T*N generated tokens per episode
    tau  tool latency of one call;   o_tool: what a call costs on top (MCP round trip, observation)
    o_turn  orchestrator latency per turn outside decoding and tools (recorder, parser)
    A, V, R  acquire, evaluate and release seconds of one episode (uncontended)
    t(b) = t0 + t1*b   engine step time with b sequences decoding (each gains one token per step)
    B    max_num_seqs: at most B sequences decode at once, the rest queue
    L    live-environment cap;  a, r, e: acquire, run and evaluate workers
    c_turn   orchestrator CPU seconds per turn (one event loop: at most one core)
    c_ep, K  host CPU seconds per episode (orchestrator and its MCP servers) and the host's cores

Every bound is a rate of episodes lambda; tokens/s = lambda * D. An episode holds an environment for

    W_env = A + W_run + V + R,   W_run = D*t(b') + X_run,   X_run = (T-1)*(tau + o_tool) + T*o_turn

and the bounds are

    engine        lambda*D <= B / t(B)                  (saturation: B tokens every t(B) seconds)
    acquire       lambda   <= a / A;   evaluate: lambda <= e / V
    run stage     lambda   <= r / W_run                  (Little's law on the run workers)
    live envs     lambda   <= L / W_env                  (Little's law on the environments)
    orchestrator  lambda   <= 1 / (T * c_turn)
    host CPU      lambda   <= K / c_ep

The two Little's-law bounds depend on the batch: decoding is slower when more sequences share the
engine. They are closed-loop: C concurrent episodes (C = r, or C = L) each alternate decoding
(D*t(b') per episode) with other work (X: X_run, or X_run + A + V + R). A decoding sequence sees
itself plus each of the other C-1 decoding with probability p, the decode share of an episode
(arrival theorem, as in mean value analysis, independence assumed):

    b' = 1 + (C-1)*p,      p = D*t(b') / (D*t(b') + X)

With t(b') = alpha + beta*p, alpha = t0 + t1, beta = t1*(C-1), this fixed point is the quadratic

    D*beta*p^2 + (D*alpha + X - D*beta)*p - D*alpha = 0

whose one root in (0, 1] we take (p = D*alpha / (D*alpha + X) when beta = 0), and the bound is
C*D / (D*t(b') + X) tokens/s, i.e. the mean batch C*p divided by the step time t(b'). It is exact
for C = 1 and, t being linear, exact in expectation whenever the episodes are independent. The
worker form of Little's law on environments ((a+r+e) envs working) is implied by the per-stage
bounds, so L is the live cap alone; waiting in a queue holds an environment without progress and
is not part of W_env (a lower bound on the hold time, so an upper bound on the rate). The limit
is the minimum of the bounds (each is monotone in lambda, so the minimum is the joint operating
point in the fluid approximation); ``Limit.binding`` names it.

Omitted: prefill (a turn's new prompt tokens; with prefix caching they are the tool result, a few
tokens here); the wait of a request for the current step to end before it joins the batch (at most
one step per turn, <= 1/(2N) of the decode time on average); queueing at the knee where two bounds
are close (the fluid minimum is an upper bound there); correlation between episodes (members of a
group start together, equal tool latencies keep episodes in step), under which a decoding sequence
sees more than b' and acquisitions contend for the CPU: the limit is then optimistic. The reverse
(episodes that interleave better than independent ones) can beat the closed-loop bounds slightly.
"""

from __future__ import annotations

import math

import msgspec

BOUNDS = ("engine", "acquire", "run", "live_envs", "evaluate", "orchestrator_cpu", "host_cpu")


class Workload(msgspec.Struct, frozen=True, kw_only=True):
    """What the rollout runs and on what (see the module docstring for the symbols)."""

    turns: int
    """T: model turns per episode; T-1 tool calls, then the final answer."""
    tokens_per_turn: int
    """N: generated tokens per turn."""
    tool_latency_s: float
    """tau: seconds one tool call takes on its server."""
    step_t0_s: float
    """t0: fixed seconds of one engine step."""
    step_t1_s: float
    """t1: seconds one step adds per decoding sequence."""
    max_num_seqs: int
    """B: most sequences decoding at once."""
    live_cap: int
    """L: most environments alive at once."""
    acquire_workers: int
    run_workers: int
    eval_workers: int
    acquire_s: float = 0.0
    """A: seconds to acquire an environment and open its MCP sessions."""
    evaluate_s: float = 0.0
    """V: seconds to evaluate a finished episode."""
    release_s: float = 0.0
    """R: seconds to close the sessions and release the environment."""
    tool_overhead_s: float = 0.0
    """o_tool: seconds a tool call costs beyond tau."""
    turn_overhead_s: float = 0.0
    """o_turn: orchestrator seconds per turn outside decoding and tool calls."""
    orchestrator_cpu_s_per_turn: float = 0.0
    """c_turn: CPU seconds of the orchestrator's event loop per turn (0: not bounding)."""
    host_cpu_s_per_episode: float = 0.0
    """c_ep: CPU seconds per episode of every process of the run (0: not bounding)."""
    host_cores: float = 1.0
    """K: cores those processes share."""

    def __post_init__(self) -> None:
        for name in ("turns", "tokens_per_turn", "max_num_seqs", "live_cap"):
            _check(name, getattr(self, name), 1, integer=True)
        for name in ("acquire_workers", "run_workers", "eval_workers"):
            _check(name, getattr(self, name), 1, integer=True)
        _check("step_t0_s", self.step_t0_s, 0.0, integer=False)
        _check("step_t1_s", self.step_t1_s, 0.0, integer=False)
        if self.step_t0_s + self.step_t1_s <= 0:
            raise ValueError("Workload step_t0_s + step_t1_s must be > 0: an engine step takes time")
        for name in (
            "tool_latency_s",
            "acquire_s",
            "evaluate_s",
            "release_s",
            "tool_overhead_s",
            "turn_overhead_s",
            "orchestrator_cpu_s_per_turn",
            "host_cpu_s_per_episode",
        ):
            _check(name, getattr(self, name), 0.0, integer=False)
        if not (self.host_cores > 0 and math.isfinite(self.host_cores)):
            raise ValueError(f"Workload host_cores must be a finite number > 0, got {self.host_cores!r}")

    @property
    def tokens_per_episode(self) -> int:
        """D = T*N."""
        return self.turns * self.tokens_per_turn

    @property
    def other_run_s(self) -> float:
        """X_run = (T-1)*(tau + o_tool) + T*o_turn: an episode's run time outside decoding."""
        tool = (self.turns - 1) * (self.tool_latency_s + self.tool_overhead_s)
        return tool + self.turns * self.turn_overhead_s

    def step_time(self, batch: float) -> float:
        return step_time(batch, self.step_t0_s, self.step_t1_s)


class Limit(msgspec.Struct, frozen=True, kw_only=True):
    """The physical limit and every bound behind it, in generated tokens per second."""

    bounds: dict[str, float]
    """Each bound of ``BOUNDS`` (``inf`` where a cost is zero)."""
    binding: str
    """The bound that is the limit (the first of ``BOUNDS`` on a tie)."""
    tokens_per_s: float
    episodes_per_s: float
    run_s: float
    """W_run at the run stage's operating point (C = r)."""
    env_s: float
    """W_env = A + W_run + V + R."""
    engine_share: float
    """The limit over the engine's saturation rate (1: the engine is the limit)."""


def _check(name: str, value: object, low: float, integer: bool) -> None:
    what = "an integer" if integer else "a finite number"
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not (math.isfinite(value) and value >= low):
        raise ValueError(f"Workload {name} must be {what} >= {low:g}, got {value!r}")


def step_time(batch: float, t0: float, t1: float) -> float:
    """t(b) = t0 + t1*b: seconds of one engine step with ``batch`` sequences decoding."""
    if batch < 0:
        raise ValueError(f"step_time batch must be >= 0, got {batch!r}")
    return t0 + t1 * batch


def saturation_rate(max_num_seqs: int, t0: float, t1: float) -> float:
    """B / t(B): tokens/s of an engine with every one of its ``max_num_seqs`` slots decoding."""
    return max_num_seqs / step_time(max_num_seqs, t0, t1)


def engine_saturation(workload: Workload) -> float:
    return saturation_rate(workload.max_num_seqs, workload.step_t0_s, workload.step_t1_s)


def decode_share(concurrency: int, decode_tokens: int, other_s: float, t0: float, t1: float) -> float:
    """p: the fraction of an episode's time spent decoding when ``concurrency`` episodes share the
    engine, each decoding ``decode_tokens`` tokens and spending ``other_s`` seconds elsewhere
    (the root in (0, 1] of the quadratic in the module docstring)."""
    if concurrency < 1 or decode_tokens < 1:
        raise ValueError(
            f"decode_share needs concurrency >= 1 and decode_tokens >= 1, got {concurrency}, {decode_tokens}"
        )
    if other_s < 0 or t0 < 0 or t1 < 0 or t0 + t1 <= 0:
        raise ValueError(
            f"decode_share needs other_s, t0, t1 >= 0 and t0 + t1 > 0, got {other_s}, {t0}, {t1}"
        )
    d = float(decode_tokens)
    alpha, beta = t0 + t1, t1 * (concurrency - 1)
    if beta == 0:
        return d * alpha / (d * alpha + other_s)
    qa, qb, qc = d * beta, d * alpha + other_s - d * beta, -d * alpha
    # The numerically stable root of qa*p^2 + qb*p + qc = 0 with qa > 0 > qc.
    disc = math.sqrt(qb * qb - 4 * qa * qc)
    return (-qb + disc) / (2 * qa) if qb <= 0 else (2 * qc) / (-qb - disc)


def seen_batch(concurrency: int, share: float) -> float:
    """b' = 1 + (C-1)*p: the batch a decoding sequence shares the engine with, itself included."""
    return 1 + (concurrency - 1) * share


def closed_loop_rate(concurrency: int, decode_tokens: int, other_s: float, t0: float, t1: float) -> float:
    """C*D / (D*t(b') + X): tokens/s of ``concurrency`` episodes cycling through decode and other work."""
    p = decode_share(concurrency, decode_tokens, other_s, t0, t1)
    cycle = decode_tokens * step_time(seen_batch(concurrency, p), t0, t1) + other_s
    return concurrency * decode_tokens / cycle


def _per_episode(workers: int, seconds: float) -> float:
    return math.inf if seconds == 0 else workers / seconds


def physical_limit(workload: Workload) -> Limit:
    """Every bound of the module docstring, and their minimum."""
    w = workload
    d = w.tokens_per_episode
    t0, t1 = w.step_t0_s, w.step_t1_s
    hold = w.acquire_s + w.evaluate_s + w.release_s
    per_turn_cpu = w.turns * w.orchestrator_cpu_s_per_turn
    bounds = {
        "engine": engine_saturation(w),
        "acquire": _per_episode(w.acquire_workers, w.acquire_s) * d,
        "run": closed_loop_rate(w.run_workers, d, w.other_run_s, t0, t1),
        "live_envs": closed_loop_rate(w.live_cap, d, w.other_run_s + hold, t0, t1),
        "evaluate": _per_episode(w.eval_workers, w.evaluate_s) * d,
        "orchestrator_cpu": _per_episode(1, per_turn_cpu) * d,
        "host_cpu": _per_episode(1, w.host_cpu_s_per_episode) * w.host_cores * d,
    }
    binding = min(BOUNDS, key=lambda name: bounds[name])
    rate = bounds[binding]
    p = decode_share(w.run_workers, d, w.other_run_s, t0, t1)
    run_s = d * w.step_time(seen_batch(w.run_workers, p)) + w.other_run_s
    return Limit(
        bounds=bounds,
        binding=binding,
        tokens_per_s=rate,
        episodes_per_s=rate / d,
        run_s=run_s,
        env_s=run_s + hold,
        engine_share=rate / bounds["engine"],
    )
