"""Evaluator: score a finished trajectory with its task's evaluators, against the live environment.

Each ``EvaluatorSpec`` is either a generic MCP-Universe op (``func`` chain + ``op`` + ``value``),
applied to the trajectory's final answer, or the name of a registered ``@evaluator`` function of
the domain, called with a handle to the environment the agent acted on (rewards are often read
from its state). The task passes when every evaluator passes: reward 1.0, else 0.0, with each
verdict in the details. A trajectory with no final answer fails the generic checks (that is the
model's doing); an evaluator that raises is an ``EvaluatorError``: the pipeline drops the
trajectory and counts it, it never becomes a silent 0.0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from actors.provisioners.base import make_provisioner

from specs.env import EnvHandle, EnvInfo
from specs.trajectory import Trajectory
from rewards.ops import EvalOutcome, evaluate_op
from specs.evaluator_grammar import is_generic_op
from specs.errors import EvaluatorError, MCPRLError
from specs.registry import resolve


class Evaluator:
    def __init__(self, hook_modules: Sequence[str] = ()) -> None:
        self._modules = tuple(hook_modules)

    async def evaluate(self, task: Any, trajectory: Trajectory, env: EnvInfo) -> tuple[float, dict[str, Any]]:
        """``(reward, details)``; raises ``EvaluatorError`` when an evaluator cannot run."""
        if not task.evaluators:
            raise EvaluatorError(f"task {task.instance_id} has no evaluators: nothing can score it")
        verdicts: list[dict[str, Any]] = []
        for index, spec in enumerate(task.evaluators):
            outcome = await self._one(task, trajectory, env, spec, index)
            verdicts.append(
                {"func": spec.func, "op": spec.op, "passed": outcome.passed, "reason": outcome.reason}
            )
        passed = all(v["passed"] for v in verdicts)
        return (1.0 if passed else 0.0), {"evaluators": verdicts}

    async def _one(
        self, task: Any, trajectory: Trajectory, env: EnvInfo, spec: Any, index: int
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
