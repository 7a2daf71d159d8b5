"""Every benchmark under ``launch/bench/`` runs in its ``--quick`` mode, so the scripts never rot.

Each runs as its own process, the way a user runs it (``python -m launch.bench.<name> --quick``),
and must end with its summary line ``<name>: key=value ...`` carrying finite, positive figures.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def run_bench(name: str, *args: str, timeout_s: float = 600) -> dict[str, float]:
    """Run ``launch.bench.<name>`` and return the key=value pairs of its summary line."""
    done = subprocess.run(
        [sys.executable, "-m", f"launch.bench.{name}", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert done.returncode == 0, f"bench {name} exited {done.returncode}:\n{done.stderr[-4000:]}"
    lines = [line for line in done.stdout.splitlines() if line.startswith(f"{name}: ")]
    assert lines, f"bench {name} printed no '{name}: ...' summary line:\n{done.stdout[-4000:]}"
    return {key: float(value) for key, value in re.findall(r"(\w+)=([-\d.eE+]+)", lines[-1])}


@pytest.mark.slow
def test_the_generator_bench_compares_plain_vllm_with_our_engine(model_dir: Path) -> None:
    figures = run_bench("generator", "--quick", "--model", str(model_dir))
    assert set(figures) == {"plain_tok_s", "engine_tok_s", "ratio"}
    assert all(math.isfinite(v) and v > 0 for v in figures.values())
    assert figures["ratio"] == pytest.approx(figures["engine_tok_s"] / figures["plain_tok_s"], rel=0.01)


@pytest.mark.slow
def test_the_learner_logits_bench_times_both_arms(model_dir: Path) -> None:
    figures = run_bench("learner_logits", "--quick", "--model", str(model_dir))
    assert set(figures) == {"speedup", "peak_rss_ratio", "samples", "context", "generated"}
    assert all(math.isfinite(v) and v > 0 for v in figures.values())


@pytest.mark.slow
def test_the_learner_surgery_bench_times_both_arms(model_dir: Path) -> None:
    figures = run_bench("learner_surgery", "--quick", "--kl", "0.1", "--model", str(model_dir))
    assert set(figures) == {"speedup", "samples", "context", "generated", "losses"}
    assert all(math.isfinite(v) and v > 0 for v in figures.values())
    assert figures["losses"] == 3


def test_the_learner_mfu_bench_times_a_model_built_from_its_config() -> None:
    figures = run_bench("learner_mfu", "--quick")
    assert set(figures) == {"tiny_llama_tok_s", "tiny_llama_mfu"}
    assert all(math.isfinite(v) and v > 0 for v in figures.values())
