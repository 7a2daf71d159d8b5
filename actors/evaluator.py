"""Evaluator: the one place an episode is scored, against the live environment.

``Evaluator.evaluate`` returns the episode's typed ``Score`` (``specs.trajectory``): each of the
task's evaluators' verdicts with its message, the task success (every evaluator passed) and its
0/1 task reward (``algorithm.truncated_reward`` instead for an episode cut by a limit, when set),
and each reward family the run switched on (``specs.scoring``): MCPDisCo's tool reward (from the
gateway's typed call records), its reasoning reward, and the tool-adoption return and bonus. A
family that is off is ``None``. Advantages, metrics, W&B and the eval tables read the ``Score``
and nothing else.

Each ``EvaluatorSpec`` is either a generic MCP-Universe op (``func`` chain + ``op`` + ``value``),
applied to the trajectory's final answer, or the name of a registered ``@evaluator`` function of
the domain, called with a handle to the environment the agent acted on (rewards are often read
from its state). A trajectory with no final answer fails the generic checks (that is the model's
doing); an evaluator that raises is an ``EvaluatorError``: the pipeline drops the trajectory and
counts it, it never becomes a silent 0.0.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import msgspec

from actors.provisioners.base import make_provisioner
from policies.batch import turn_spans
from policies.thought import reasoning_text
from rewards.adoption import shaped_return, tool_bonus
from rewards.ops import EvalOutcome, evaluate_op
from rewards.reasoning_reward import ReasoningScorer
from rewards.tool_reward import trajectory_tool_reward
from specs.env import EnvHandle, EnvInfo
from specs.errors import EvaluatorError, MCPRLError
from specs.evaluator_grammar import is_generic_op
from specs.registry import resolve
from specs.scoring import AdoptionScoring, ScoringConfig
from specs.task import EvaluatorSpec, TaskSpec
from specs.trajectory import AdoptionScore, Score, Trajectory, Verdict


class Evaluator:
    """Scores finished episodes; ``reasoning_scorer`` replaces the packaged models (tests)."""

    def __init__(
        self,
        hook_modules: Sequence[str] = (),
        scoring: ScoringConfig | None = None,
        reasoning_scorer: ReasoningScorer | None = None,
    ) -> None:
        self._modules = tuple(hook_modules)
        self._scoring = scoring or ScoringConfig()
        fmt = self._scoring.reasoning_format
        self._reasoning = reasoning_scorer or (ReasoningScorer(fmt=fmt) if fmt is not None else None)

    async def evaluate(self, task: TaskSpec, trajectory: Trajectory, env: EnvInfo) -> Score:
        """The episode's score; raises ``EvaluatorError`` when an evaluator cannot run."""
        if not task.evaluators:
            raise EvaluatorError(f"task {task.instance_id} has no evaluators: nothing can score it")
        verdicts = []
        for index, spec in enumerate(task.evaluators):
            outcome = await self._one(task, trajectory, env, spec, index)
            verdicts.append(
                Verdict(func=spec.func, op=spec.op, passed=outcome.passed, message=outcome.reason)
            )
        score = Score.of(tuple(verdicts))
        if trajectory.truncated and self._scoring.truncated_task is not None:
            score = msgspec.structs.replace(score, task=self._scoring.truncated_task)
        try:
            return await self._families(task, trajectory, score)
        except Exception as e:  # a reward family that cannot be computed drops the episode, loudly
            raise EvaluatorError(
                f"task {task.instance_id}: a reward family failed: {type(e).__name__}: {e}"
            ) from e

    async def _families(self, task: TaskSpec, trajectory: Trajectory, score: Score) -> Score:
        """``score`` with each reward family the run switched on (``specs.scoring``)."""
        scoring = self._scoring
        tool: float | None = None
        reasoning: float | None = None
        adoption: AdoptionScore | None = None
        if scoring.tool_reward:
            tool = trajectory_tool_reward(trajectory, task.reference_calls, success=score.success).total
        if self._reasoning is not None:
            reasoning = await anyio.to_thread.run_sync(self._reasoning_score, task, trajectory)
        if scoring.adoption is not None:
            adoption = _adoption(trajectory, score.success, scoring.adoption)
        return msgspec.structs.replace(score, tool=tool, reasoning=reasoning, adoption=adoption)

    def _reasoning_score(self, task: TaskSpec, trajectory: Trajectory) -> float:
        """R_reasoning over the reasoning of every model turn (MCPDisCo eqs. 1-4)."""
        assert self._reasoning is not None
        turns = [str(m["content"]) for m in trajectory.messages if m.get("role") == "assistant"]
        text = "\n".join(filter(None, (reasoning_text(turn, self._reasoning.fmt) for turn in turns)))
        return self._reasoning.score(task.instruction, text, turns=turns).total

    async def _one(
        self, task: TaskSpec, trajectory: Trajectory, env: EnvInfo, spec: EvaluatorSpec, index: int
    ) -> EvalOutcome:
        where = f"task {task.instance_id} evaluator[{index}] ({spec.func!r} {spec.op!r})"
        try:
            if is_generic_op(spec.op):
                if trajectory.final_answer is None:
                    return EvalOutcome(passed=False, reason="no final answer")
                return evaluate_op(spec.func, spec.op, spec.value, spec.op_args, trajectory.final_answer)
            fn = resolve("evaluator", spec.op, self._modules, source=f"task {task.instance_id}")
            handle = EnvHandle(env, make_provisioner(env.backend))
            outcome = await fn(handle, task, trajectory, value=spec.value, **(spec.op_args or {}))
        except EvaluatorError as e:
            raise EvaluatorError(f"{where}: {e}") from e
        except MCPRLError:
            raise
        except Exception as e:  # a domain evaluator crashed: drop the trajectory, say which and why
            raise EvaluatorError(f"{where} raised {type(e).__name__}: {e}") from e
        if not isinstance(outcome, EvalOutcome):
            raise EvaluatorError(
                f"{where} returned {type(outcome).__name__}; expected rewards.ops.EvalOutcome"
            )
        return outcome


def _adoption(trajectory: Trajectory, success: bool, cfg: AdoptionScoring) -> AdoptionScore:
    """Paper 002's return (Eq. 3) and per-step bonus (Eq. 4's ``lambda_mcp b_t``) of one episode; its
    steps are its recorded model turns (at least one)."""
    steps = max(len(turn_spans(trajectory)), 1)
    calls = [c for c in trajectory.tool_calls if c.turn <= steps]
    bonus = tool_bonus(calls, lambda_mcp=cfg.lambda_mcp)
    return AdoptionScore(
        shaped_return=shaped_return(
            success, steps, cfg.max_steps, lambda_len=cfg.lambda_len, lambda_cap=cfg.lambda_cap
        ),
        steps=steps,
        step_bonus=tuple(bonus.get(turn, 0.0) for turn in range(1, steps + 1)),
    )
