"""Means and standard errors for episode metrics, with the task as the unit of sampling.

The ``K`` episodes sampled for one task are correlated,
so the unit of sampling is the task: every metric of ``policies.metrics`` is a ratio ``R = Σ_x y_x / Σ_x n_x`` of task
sums (``y_x = Σ_{τ ∈ x} v(τ)``, ``n_x`` its episodes; for ``tool_step_share``, its tool-calling
turns over its turns) whose standard error is the delta-method (linearisation) one of a ratio
estimator (Cochran, *Sampling Techniques*, 3rd ed., ch. 6, without finite-population correction):

    SE(R) = sqrt( Σ_x (y_x − R n_x)² / (J (J − 1)) ) / n̄,     n̄ = Σ_x n_x / J,

which with one episode per task (greedy evaluation) is the plain ``s / sqrt(n)`` of
``mean_and_stderr`` (``s`` the sample standard deviation, Bessel-corrected). ``task_adoption`` is a
plain mean over tasks. Fewer than two tasks: standard error 0. Paper 002 (§3) calls a difference
significant when ``|Δ| > 2 SE``; its SE is across 5 repeated runs, ours across tasks (the
quantity that also covers which tasks were drawn).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence


def mean_and_stderr(values: Iterable[float]) -> tuple[float, float]:
    """``(x̄, s / sqrt(n))`` with ``s`` the sample standard deviation (``n − 1``); ``n < 2``: SE 0."""
    xs = [float(v) for v in values]
    n = len(xs)
    if n == 0:
        raise ValueError("mean_and_stderr: got no values; expected at least one")
    mean = sum(xs) / n
    if n < 2:
        return mean, 0.0
    variance = sum((x - mean) ** 2 for x in xs) / (n - 1)
    return mean, math.sqrt(variance / n)


def ratio_and_stderr(numerators: Sequence[float], denominators: Sequence[float]) -> tuple[float, float]:
    """``(R, SE(R))`` of ``R = Σ y / Σ n`` over ``J`` clusters (module docstring); ``Σ n = 0``: ``(0, 0)``."""
    if len(numerators) != len(denominators):
        raise ValueError(
            f"ratio_and_stderr: {len(numerators)} numerators but {len(denominators)} denominators; "
            "expected one of each per cluster"
        )
    j = len(numerators)
    if j == 0:
        raise ValueError("ratio_and_stderr: got no clusters; expected at least one")
    total = float(sum(denominators))
    if total == 0:
        return 0.0, 0.0
    ratio = float(sum(numerators)) / total
    if j < 2:
        return ratio, 0.0
    spread = sum((y - ratio * d) ** 2 for y, d in zip(numerators, denominators, strict=True))
    return ratio, math.sqrt(spread / (j * (j - 1))) / (total / j)


def seeds_and_tasks_mean_and_stderr(values: Mapping[int, Mapping[str, float]]) -> tuple[float, float]:
    """``(x̄, SE)`` of ``x̄`` over a ``K seeds × n tasks`` table ``x_{s,i}`` (every seed on the same
    tasks: a training run per seed, each evaluated on one task set), for a value per task (a greedy
    success, a sampled pass rate, a paired difference ``final − warm start``).

    Two sources of noise: which tasks the set holds, and how each seed's training run went. With
    ``x̄_i`` the mean over seeds of task ``i`` and ``x̄_s`` the mean over tasks of seed ``s``,

        SE² = s²(x̄_i) / n + s²(x̄_s) / K,

    both sample variances Bessel-corrected. The task term is the clustered-by-task SE of the
    seed-averaged values; the seed term is the spread of whole runs (it also holds task noise
    ``/n``, so the sum errs on the large side). One seed: the seed term is unknown and left out
    (the SE covers the task set only; ``launch.bench.learning`` says so). Example: seeds 0 and 1
    over tasks a, b with ``x = {0: {a: 1, b: 0}, 1: {a: 1, b: 1}}``: ``x̄ = 0.75``, task means
    ``(1, 0.5)`` -> ``s² = 0.125``, seed means ``(0.5, 1)`` -> ``s² = 0.125``,
    ``SE = sqrt(0.125/2 + 0.125/2) = 0.354``.
    """
    if not values:
        raise ValueError("seeds_and_tasks_mean_and_stderr: got no seeds; expected at least one")
    tasks = sorted(next(iter(values.values())))
    if not tasks:
        raise ValueError("seeds_and_tasks_mean_and_stderr: got no tasks; expected at least one")
    for seed, row in values.items():
        if sorted(row) != tasks:
            missing, extra = sorted(set(tasks) - set(row)), sorted(set(row) - set(tasks))
            raise ValueError(
                f"seeds_and_tasks_mean_and_stderr: seed {seed} has other tasks than the first seed "
                f"(missing {missing[:3]}, extra {extra[:3]}); expected every seed on the same tasks"
            )
    seeds = list(values)
    task_means = [sum(values[s][i] for s in seeds) / len(seeds) for i in tasks]
    seed_means = [sum(values[s].values()) / len(tasks) for s in seeds]
    mean, task_se = mean_and_stderr(task_means)
    _, seed_se = mean_and_stderr(seed_means)
    return mean, math.sqrt(task_se**2 + seed_se**2)
