"""``launch/bench/env_front_sim.py``: the front over simulated fleets of 100+ nodes, ``--quick``."""

from __future__ import annotations

import math
import re

import pytest

from launch.bench import env_front_sim


def test_the_quick_simulation_places_every_episode_within_capacity_both_ways(
    capsys: pytest.CaptureFixture[str],
) -> None:
    results = env_front_sim.main(["--quick"])
    assert [(r.nodes, r.placement) for r in results] == [
        (100, "all"), (100, "sampled"), (200, "all"), (200, "sampled")
    ]  # fmt: skip
    for r in results:
        assert r.over == 0, r  # a node with no room gets nothing while another has some
        assert math.isfinite(r.spread) and r.spread >= 1.0 and 0.0 < r.reuse <= 1.0 and r.front_s > 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("env_front_sim: ")]
    assert len(lines) == 6 and all(re.search(r"cost_all_x_sampled=[\d.]+$", line) for line in lines[2::3])
