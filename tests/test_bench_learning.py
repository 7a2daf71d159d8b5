"""The learning bench: its plan of trials, and its numbers read back from run directories written
the way ``launch.report.Reporter`` writes them (the runs themselves are the product's training runs,
tested elsewhere; the end-to-end reward-goes-up run is ``tests/test_reward_goes_up.py``)."""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

import msgspec
import pytest

from launch.bench.learning import ABLATIONS, Bench, main, parse_args, plan
from launch.bench.learning_report import analyse, last_line, report
from launch.bench.trial_files import DONE
from launch.run_results import closing_table, read_run, task_group
from policies.stats import seeds_and_tasks_mean_and_stderr
from specs.config import RunConfig, load_run_config, to_dict
from specs.trajectory import Score, Trajectory, Verdict

TASKS = ("calc-eval-seen-0000", "calc-eval-seen-0001", "calc-eval-heldout-0000", "calc-eval-heldout-0001")


def episode(task: str, success: bool, calls: int = 0) -> Trajectory:
    verdict = Verdict(func="number", op="approx", passed=success)
    return Trajectory(
        task_id=task,
        group_id=f"g-{task}",
        token_ids=[1, 2],
        trainable=[0, 1],
        logprobs=[0.0, -0.5],
        versions=[0, 0],
        messages=[],
        score=Score.of((verdict,)),
        tool_calls=[],
        num_turns=1 + calls,
    )


def config_of(bench: Bench, run_name: str) -> RunConfig:
    return next(cfg for _, _, cfg in bench.trials if cfg.run_name == run_name)


Outcomes = list[bool] | dict[str, bool]
"""Per task of ``TASKS`` in order, or per named task."""


def write_run(
    cfg: RunConfig, evals: dict[str, Outcomes], step_s: list[float], trained: Sequence[str] = ()
) -> None:
    """What a training run of ``cfg`` writes: per phase one greedy episode per task (its success
    given), a first step's episodes on the ``trained`` tasks, and a metrics row per step with its seconds."""
    run_dir = Path(cfg.run_dir)
    (run_dir / "trajectories").mkdir(parents=True)
    written = {**evals, "step_0001": dict.fromkeys(trained, False)} if trained else evals
    for phase, successes in written.items():
        outcomes = successes if isinstance(successes, dict) else dict(zip(TASKS, successes, strict=True))
        lines = [msgspec.json.encode(episode(t, ok)) for t, ok in outcomes.items()]
        name = phase if phase.startswith("step_") else f"eval_{phase}"
        (run_dir / "trajectories" / f"{name}.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    rows = [{"phase": "eval/base", "step": 0, "success": 0.0}]
    rows += [{"phase": "train", "step": i + 1, "step_s": s} for i, s in enumerate(step_s)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def append_rows(run_dir: str, *rows: dict[str, object]) -> None:
    with open(Path(run_dir, "metrics.jsonl"), "a") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)


def write_trial(
    cfg: RunConfig, evals: dict[str, Outcomes], step_s: list[float], trained: Sequence[str] = ()
) -> None:
    """A finished trial of ``cfg``: its run, and its record as ``run_trials`` writes it."""
    write_run(cfg, evals, step_s, trained)
    results = read_run(cfg.run_dir, cfg.train.steps)
    Path(cfg.run_dir, DONE).write_bytes(msgspec.json.encode({"config": to_dict(cfg), "results": results}))


def test_the_seeds_and_tasks_standard_error_adds_the_task_and_the_seed_terms():
    # the docstring's example: task means (1, 0.5), seed means (0.5, 1)
    mean, se = seeds_and_tasks_mean_and_stderr({0: {"a": 1, "b": 0}, 1: {"a": 1, "b": 1}})
    assert mean == 0.75 and se == pytest.approx(math.sqrt(0.125 / 2 + 0.125 / 2))
    # one seed: the task term alone, s / sqrt(n) of the values
    mean, se = seeds_and_tasks_mean_and_stderr({3: {"a": 1, "b": 0, "c": 0, "d": 1}})
    assert mean == 0.5 and se == pytest.approx(math.sqrt(1 / 3 / 4))
    with pytest.raises(ValueError, match="seed 1 has other tasks than the first seed"):
        seeds_and_tasks_mean_and_stderr({0: {"a": 1}, 1: {"b": 1}})


def test_task_groups_come_from_the_generators_ids():
    assert task_group("calc-eval-heldout-0003") == "heldout"
    assert task_group("apps-eval-seen-0000") == "seen"
    assert task_group("swe-eval-project-0009") == "project"
    assert task_group("my-task") is None


def test_the_plan_runs_every_arm_of_an_ablation_on_the_same_seeds(tmp_path):
    bench = plan(
        parse_args(["--ablation", "tool_bonus", "--seeds", "2", "--steps", "3", "--out", str(tmp_path)])
    )
    assert [(arm.name, seed) for arm, seed, _ in bench.trials] == [
        ("no_bonus", 0),
        ("bonus", 0),
        ("no_bonus", 1),
        ("bonus", 1),
    ]
    for arm, seed, cfg in bench.trials:
        assert cfg.seed == seed and cfg.train.steps == 3 and cfg.algorithm.returns == "adoption"
        assert cfg.algorithm.tool_bonus == (0.1 if arm.name == "bonus" else 0.0)
        assert cfg.run_dir == os.path.join(str(tmp_path), f"{arm.name}-s{seed}")
        assert cfg.wandb.group == "demo-tool_bonus"
    quick = plan(parse_args(["--quick", "--out", str(tmp_path)]))
    assert [(a.name, s) for a, s, _ in quick.trials] == [("grpo", 0)]
    alone = plan(parse_args(["--seed", "2", "--out", str(tmp_path)]))
    assert [(a.name, s, c.run_dir) for a, s, c in alone.trials] == [
        ("grpo", 2, os.path.join(str(tmp_path), "grpo-s2"))
    ]
    with pytest.raises(SystemExit):
        parse_args(["--seed", "1", "--quick"])


def test_seed_in_an_override_is_each_trials_seed(tmp_path):
    bench = plan(
        parse_args(["--seeds", "2", "--out", str(tmp_path), "warmstart.from_run=runs/x/grpo-s{seed}"])
    )
    assert [(seed, cfg.warmstart.from_run) for _, seed, cfg in bench.trials] == [
        (0, "runs/x/grpo-s0"),
        (1, "runs/x/grpo-s1"),
    ]


def test_every_ablation_is_a_valid_config(tmp_path):
    for name in ABLATIONS:
        bench = plan(parse_args(["--ablation", name, "--seeds", "1", "--out", str(tmp_path)]))
        assert len(bench.trials) == 2
    rule = {a.name: c for a, _, c in plan(parse_args(["--ablation", "observation_rule", "--quick"])).trials}
    # both arms are evaluated under the rule; only the matched one trains under it
    assert (
        rule["matched"].rollout.observation_rule is not None
        and rule["matched"].train.eval_observation_rule is None
    )
    assert rule["mismatched"].rollout.observation_rule is None
    assert rule["mismatched"].train.eval_observation_rule == rule["matched"].rollout.observation_rule

    # whatever the config sets (apps.yaml scores cut episodes as failed), one arm scores them by
    # the evaluators and the other as failed
    apps = os.path.join(os.path.dirname(__file__), "..", "launch", "configs", "apps.yaml")
    cut = plan(parse_args(["--config", apps, "--ablation", "truncated_reward", "--seeds", "1"])).trials
    assert [(a.name, c.algorithm.truncated_reward) for a, _, c in cut] == [
        ("evaluators", None),
        ("cut_fails", 0.0),
    ]


def test_the_arms_of_an_ablation_share_the_first_arms_warm_start_once_it_kept_one(tmp_path):
    from launch.bench.trial_files import finished, with_shared_warm_start

    bench = plan(parse_args(["--ablation", "tool_bonus", "--seeds", "2", "--out", str(tmp_path)]))
    assert [c.warmstart.save for _, _, c in bench.trials] == [True, False, True, False]
    (first, _, no_bonus), (second, seed, bonus) = bench.trials[0], bench.trials[1]
    assert with_shared_warm_start(bench, second, seed, bonus) == bonus  # nothing kept yet: its own
    (Path(no_bonus.run_dir) / "warmstart").mkdir(parents=True)
    (Path(no_bonus.run_dir) / "warmstart" / "progress.json").write_text("{}")
    shared = with_shared_warm_start(bench, second, seed, bonus)
    assert shared.warmstart.from_run == no_bonus.run_dir and shared.algorithm == bonus.algorithm
    assert with_shared_warm_start(bench, first, 0, no_bonus) == no_bonus
    assert with_shared_warm_start(bench, second, 1, bench.trials[3][2]).warmstart.from_run is None  # seed 1's
    # a trial that finished without keeping its warm start is the same trial (it only lacks the copy)
    write_trial(
        msgspec.structs.replace(no_bonus, warmstart=msgspec.structs.replace(no_bonus.warmstart, save=False)),
        {},
        [],
    )
    assert finished(no_bonus)
    rule = plan(parse_args(["--ablation", "observation_rule", "--quick", "--out", str(tmp_path / "r")]))
    assert not any(c.warmstart.save for _, _, c in rule.trials)  # the rule changes the demonstrations too


def test_the_report_reads_an_arm_that_ran_from_the_shared_warm_start(tmp_path, capsys):
    from launch.bench.learning_report import report
    from launch.bench.trial_files import with_shared_warm_start

    bench = plan(parse_args(["--ablation", "tool_bonus", "--quick", "--out", str(tmp_path)]))
    (first, _, no_bonus), (second, seed, bonus) = bench.trials
    evals = {
        "base": [False] * 4,
        "warmstart": [True, False, False, False],
        "final": [True, True, False, False],
    }
    write_trial(no_bonus, evals, [1.0])
    (Path(no_bonus.run_dir) / "warmstart").mkdir()
    (Path(no_bonus.run_dir) / "warmstart" / "progress.json").write_text("{}")
    shared = with_shared_warm_start(bench, second, seed, bonus)
    assert shared.warmstart.from_run == no_bonus.run_dir
    write_trial(shared, evals, [1.0])  # what run_trials records: the config it ran with
    line = report(bench)
    assert line.startswith("rl_minus_warmstart=0.25")
    assert "bonus" in capsys.readouterr().out
    # carried elsewhere as records alone, without the warm start's weights: still both arms' trials
    for cfg in (no_bonus, shared):
        for name in os.listdir(cfg.run_dir):
            path = Path(cfg.run_dir, name)
            if path.is_dir():
                shutil.rmtree(path)
            elif name != DONE:
                path.unlink()
    assert with_shared_warm_start(bench, second, seed, bonus) == shared
    assert report(bench) == line


def test_a_bench_without_a_warm_start_is_refused(capsys):
    assert main(["--quick", "warmstart.enabled=false", "--report-only"]) == 2
    assert "warmstart.enabled" in capsys.readouterr().err


def test_the_report_pairs_rl_with_the_warm_start_per_task_and_seed(tmp_path):
    bench = plan(parse_args(["--seeds", "2", "--steps", "2", "--out", str(tmp_path)]))
    # seed 0: warm start solves 1 of 4, final 3 of 4; seed 1: 0 -> 2; a mid-run eval at step 1
    write_trial(
        config_of(bench, "grpo-s0"),
        {
            "base": [False] * 4,
            "warmstart": [True, False, False, False],
            "step1": [True, True, False, False],
            "final": [True, True, True, False],
        },
        [10.0, 20.0],
    )
    write_trial(
        config_of(bench, "grpo-s1"),
        {
            "base": [False] * 4,
            "warmstart": [False] * 4,
            "step1": [True, False, False, False],
            "final": [True, True, False, False],
        },
        [30.0, 40.0],
    )
    trials = [read_run(str(tmp_path / f"grpo-s{s}"), 2, "grpo", s) for s in (0, 1)]
    result = analyse(bench, trials)
    grpo = result["arms"]["grpo"]
    assert result["groups"] == {"all": 4, "seen": 2, "heldout": 2} and result["se"] == "over tasks and seeds"
    # per-task gains, seed 0: (0, 1, 1, 0), seed 1: (1, 1, 0, 0)
    expected = seeds_and_tasks_mean_and_stderr(
        {0: dict(zip(TASKS, (0, 1, 1, 0), strict=True)), 1: dict(zip(TASKS, (1, 1, 0, 0), strict=True))}
    )
    assert grpo["rl_minus_warmstart"]["all"] == pytest.approx(expected) and expected[0] == 0.5
    assert grpo["rl_minus_warmstart"]["seen"][0] == 0.75 and grpo["rl_minus_warmstart"]["heldout"][0] == 0.25
    assert grpo["phases"]["final"]["all"][0] == 0.625 and grpo["phases"]["base"]["all"] == (0.0, 0.0)
    assert [(p["step"], p["train_s"], p["success"]) for p in grpo["curve"]] == [
        (0, 0.0, 0.125),
        (1, 20.0, 0.375),
        (2, 50.0, 0.625),
    ]
    line = report(bench)
    assert line == last_line(result) and line.startswith("rl_minus_warmstart=0.5000 se=")
    assert line.endswith("seeds=2 tasks=4")
    assert json.loads((tmp_path / "learning.json").read_text())["tasks"] == 4
    assert (tmp_path / "learning.png").read_bytes().startswith(b"\x89PNG")


def test_the_gain_on_training_tasks_is_reported_apart_over_all_and_over_those_trained_on(tmp_path, capsys):
    from launch.bench.learning_report import format_tables

    train = ("calc-train-0000", "calc-train-0001", "calc-train-0002")
    bench = plan(parse_args(["--seeds", "2", "--steps", "1", "--out", str(tmp_path)]))
    # seed 0 trained on the first two and gains (1, 0, 0); seed 1 on all three and gains (1, 1, 0)
    runs = [
        ((False, False, True), (True, False, True), train[:2]),
        ((False,) * 3, (True, True, False), train),
    ]
    for seed, (start, final, trained) in enumerate(runs):
        evals: dict[str, Outcomes] = {"base": [False] * 4, "warmstart": [False] * 4, "final": [True] * 4}
        evals["warmstart_train"] = dict(zip(train, start, strict=True))
        evals["final_train"] = dict(zip(train, final, strict=True))
        write_trial(config_of(bench, f"grpo-s{seed}"), evals, [5.0], trained)
    trials = [read_run(str(tmp_path / f"grpo-s{s}"), 1, "grpo", s) for s in (0, 1)]
    assert trials[0].trained == list(train[:2]) and trials[0].evals["final_train"].step == 1
    result = analyse(bench, trials)
    grpo = result["arms"]["grpo"]
    assert [p["step"] for p in grpo["curve"]] == [0, 1] and result["tasks"] == 4  # eval tasks only
    on_train = grpo["train_tasks"]
    assert on_train["groups"] == {"all": 3, "trained": 2}
    gains = {0: dict(zip(train, (1, 0, 0), strict=True)), 1: dict(zip(train, (1, 1, 0), strict=True))}
    assert on_train["rl_minus_start"]["all"] == pytest.approx(seeds_and_tasks_mean_and_stderr(gains))
    assert on_train["rl_minus_start"]["trained"][0] == 0.75
    assert on_train["phases"]["warmstart_train"]["all"][0] == pytest.approx(1 / 6)
    assert "RL - start" in format_tables(result) and "trained (2)" in format_tables(result)
    assert closing_table(trials[0]).splitlines()[-1] == (
        "on training tasks (train.eval_train_tasks), final - start paired by task: "
        "all (3) +0.33 ± 0.33, trained (2) +0.50 ± 0.50"
    )
    report(bench)  # from the trials' records: the training tasks travel with them
    assert "on training tasks" in capsys.readouterr().out


def test_a_trial_recorded_before_an_option_was_added_counts_while_the_option_is_at_its_default(tmp_path):
    from launch.bench.trial_files import finished

    bench = plan(parse_args(["--seeds", "1", "--steps", "1", "--out", str(tmp_path)]))
    cfg = config_of(bench, "grpo-s0")
    write_trial(cfg, {"base": [False] * 4, "warmstart": [False] * 4, "final": [True] * 4}, [1.0])
    record = json.loads(Path(cfg.run_dir, DONE).read_text())
    del record["config"]["train"]["eval_train_tasks"]  # as a record written before the option was
    Path(cfg.run_dir, DONE).write_text(json.dumps(record))
    assert finished(cfg)
    asking_more = msgspec.structs.replace(cfg, train=msgspec.structs.replace(cfg.train, eval_train_tasks=2))
    assert not finished(asking_more)
    record["config"]["train"]["a_removed_option"] = 1  # no longer loads: not the same trial
    Path(cfg.run_dir, DONE).write_text(json.dumps(record))
    assert not finished(cfg)


def test_a_trials_record_alone_carries_it_to_another_machine(tmp_path, monkeypatch):
    argv = ["--quick", "--out", os.path.join("runs", "b"), "wandb.mode=disabled"]
    (tmp_path / "a").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    bench = plan(parse_args(argv))
    write_trial(
        config_of(bench, "grpo-s0"),
        {"base": [False] * 4, "warmstart": [False] * 4, "final": [True, True, False, False]},
        [7.0],
    )
    line = report(bench)
    first = json.loads(Path("runs/b/learning.json").read_text())
    # another machine: the bench's out directory holding the trial's record and nothing else
    record = Path("runs/b/grpo-s0", DONE).read_bytes()
    (tmp_path / "c" / "runs" / "b" / "grpo-s0").mkdir(parents=True)
    (tmp_path / "c" / "runs" / "b" / "grpo-s0" / DONE).write_bytes(record)
    monkeypatch.chdir(tmp_path / "c")
    assert report(plan(parse_args(argv))) == line
    again = json.loads(Path("runs/b/learning.json").read_text())
    assert again["arms"] == first["arms"] and again["arms"]["grpo"]["curve"][-1]["train_s"] == 7.0


def test_a_damaged_record_is_named_with_its_field(tmp_path, capsys):
    argv = ["--quick", "--out", str(tmp_path), "--report-only", "wandb.mode=disabled"]
    cfg = config_of(plan(parse_args(argv)), "grpo-s0")
    os.makedirs(cfg.run_dir)
    Path(cfg.run_dir, DONE).write_text(json.dumps({"config": to_dict(cfg), "results": {"evals": 3}}))
    assert main(argv) == 1
    assert (
        f"{os.path.join(cfg.run_dir, DONE)}: field results: Expected `object`, got `int`"
        in capsys.readouterr().err
    )


def test_a_trial_recorded_before_records_kept_results_is_read_from_its_run_directory(tmp_path):
    bench = plan(parse_args(["--quick", "--out", str(tmp_path), "wandb.mode=disabled"]))
    cfg = config_of(bench, "grpo-s0")
    write_run(
        cfg, {"base": [False] * 4, "warmstart": [False] * 4, "final": [True, False, False, False]}, [1.0]
    )
    Path(cfg.run_dir, DONE).write_text(json.dumps({"config": to_dict(cfg)}))
    assert report(bench).startswith("rl_minus_warmstart=0.2500")


def test_an_ablation_reports_treatment_minus_reference_in_each_metric(tmp_path, capsys):
    out = str(tmp_path)
    argv = ["--ablation", "tool_bonus", "--quick", "--out", out, "--report-only", "wandb.mode=disabled"]
    bench = plan(parse_args(argv))
    write_trial(
        config_of(bench, "no_bonus-s0"),
        {"base": [False] * 4, "warmstart": [False] * 4, "final": [True, False, False, False]},
        [5.0],
    )
    write_trial(
        config_of(bench, "bonus-s0"),
        {"base": [False] * 4, "warmstart": [False] * 4, "final": [True, True, True, False]},
        [6.0],
    )
    assert main(argv) == 0
    printed = capsys.readouterr().out
    ablation = json.loads((tmp_path / "learning.json").read_text())["ablation"]
    assert ablation["metrics"]["success"]["difference"][0] == 0.5
    assert set(ablation["metrics"]) == {"success", "tool_adoption", "valid_call"}
    assert "ablation tool_bonus" in printed and printed.strip().splitlines()[-1].startswith(
        "rl_minus_warmstart=0.2500"
    )


def test_the_ablation_table_keeps_its_columns_apart_with_long_arm_names(tmp_path, capsys):
    out = str(tmp_path)
    argv = ["--ablation", "optimizer_reset", "--quick", "--out", out, "--report-only", "wandb.mode=disabled"]
    bench = plan(parse_args(argv))
    for arm, final in (
        ("kept_moments", [True, False, False, False]),
        ("fresh_moments", [True, True, True, False]),
    ):
        cfg = config_of(bench, f"{arm}-s0")
        evals = {"base": [False] * 4, "warmstart": [False] * 4, "final": final}
        write_trial(cfg, evals, [5.0] * cfg.train.steps)
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    header = lines[lines.index("ablation optimizer_reset (final evals, paired by seed and task):") + 1]
    assert header.split() == ["metric", "kept_moments", "fresh_moments", "fresh_moments", "-", "kept_moments"]
    success = next(line for line in lines if line.startswith("success "))
    assert success.split() == ["success", "0.25±0.25", "0.75±0.25", "+0.50±0.29"]


def test_a_trial_not_finished_is_named_when_nothing_can_be_compared(tmp_path, capsys):
    assert main(["--quick", "--out", str(tmp_path), "--report-only"]) == 1
    assert "no seed has a finished trial of every arm (grpo)" in capsys.readouterr().err


def test_the_closing_table_of_a_run_pairs_final_with_warm_start(tmp_path):
    cfg = load_run_config(None, [f"output_dir={tmp_path}", "run_name=run"])
    write_trial(
        cfg,
        {"base": [False] * 4, "warmstart": [True, False, False, False], "final": [True, True, True, False]},
        [1.0],
    )
    text = closing_table(read_run(cfg.run_dir, 1))
    assert text.splitlines()[3].startswith("final") and "0.75 ± 0.25" in text.splitlines()[3]
    assert text.splitlines()[-1] == (
        "RL - warm start, success paired by task: all (4) +0.50 ± 0.29, heldout (2) +0.50 ± 0.50, seen (2) +0.50 ± 0.50"
    )


def test_trials_run_once_and_an_interrupted_one_starts_afresh(tmp_path, monkeypatch):
    import launch.train
    from launch.bench.learning import run_trials

    ran = []

    def attempt(cfg):
        ran.append(cfg.run_name)
        assert not os.path.exists(os.path.join(cfg.run_dir, "stale.jsonl")), "a partial attempt was kept"
        if cfg.seed == 1:
            raise RuntimeError("generator died")
        if cfg.seed == 3:  # a run that ended without its evals
            os.makedirs(cfg.run_dir, exist_ok=True)
            return
        write_run(cfg, evals, [1.0])

    async def fake_train(cfg, verbose=False):
        attempt(cfg)
        return 0

    monkeypatch.setattr(launch.train, "train", fake_train)
    bench = plan(parse_args(["--seeds", "4", "--out", str(tmp_path)]))
    evals = {"base": [False] * 4, "warmstart": [False] * 4, "final": [False] * 4}
    write_trial(config_of(bench, "grpo-s0"), evals, [1.0])
    # seed 3 finished, but with another config (3 steps): not the trial this bench asks for
    write_trial(
        config_of(plan(parse_args(["--seeds", "4", "--steps", "3", "--out", str(tmp_path)])), "grpo-s3"),
        evals,
        [1.0],
    )
    (tmp_path / "grpo-s2").mkdir()
    (tmp_path / "grpo-s2" / "stale.jsonl").write_text("{}")  # an attempt killed before it finished
    problems = run_trials(bench, verbose=False)
    assert ran == ["grpo-s1", "grpo-s2", "grpo-s3"]  # seed 0 was done
    assert problems[0] == "grpo seed 1: RuntimeError: generator died"
    assert problems[1].startswith("grpo seed 3: FileNotFoundError: ") and len(problems) == 2
    assert [(tmp_path / f"grpo-s{s}" / DONE).exists() for s in range(4)] == [True, False, True, False]
    assert json.loads((tmp_path / "grpo-s2" / DONE).read_text())["results"]["evals"]["final"]["lost"] == 0


def test_a_trial_records_its_code_and_a_reuse_under_other_code_says_so(tmp_path, monkeypatch, capsys):
    import launch.bench.learning as learning
    import launch.train

    async def fake_train(cfg, verbose=False):
        write_run(cfg, {"base": [False] * 4, "warmstart": [False] * 4, "final": [False] * 4}, [1.0])
        return 0

    monkeypatch.setattr(launch.train, "train", fake_train)
    monkeypatch.setattr(learning, "code_version", lambda: "abc123")
    bench = plan(parse_args(["--seeds", "1", "--out", str(tmp_path)]))
    assert learning.run_trials(bench, verbose=False) == []
    assert json.loads((tmp_path / "grpo-s0" / DONE).read_text())["code"] == "abc123"

    assert learning.run_trials(bench, verbose=False) == []  # same code: reused without a word
    assert "done before" in capsys.readouterr().out
    monkeypatch.setattr(learning, "code_version", lambda: "def456+changes")
    assert learning.run_trials(bench, verbose=False) == []  # other code: still reused, and said
    out = capsys.readouterr().out
    assert "it ran code abc123, this is def456+changes" in out and "delete that directory" in out


def test_code_version_names_this_checkout():
    import subprocess

    from launch.bench.trial_files import code_version

    root = Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():
        assert code_version() == "unknown"
        return
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
    assert code_version().split("+")[0] == head.stdout.strip()[:12]


def test_an_interrupted_trial_goes_on_from_its_last_step_checkpoint_when_it_kept_one(tmp_path, monkeypatch):
    import launch.train
    from launch.bench.learning import run_trials
    from launch.bench.trial_files import STARTED, finished
    from launch.checkpoints import Progress, step_dir, write_progress

    attempts = []

    async def fake_train(cfg, verbose=False):
        attempts.append((cfg.run_name, cfg.train.resume))
        if cfg.train.resume is None:  # a first attempt: the evals, step 1's checkpoint, then killed
            (Path(cfg.run_dir) / "warm_start_was_here").write_text("")
            if cfg.train.checkpoint_every:
                os.makedirs(step_dir(cfg.checkpoint_dir, 1))
                write_progress(step_dir(cfg.checkpoint_dir, 1), Progress(step=1, version=1, position=4))
            raise RuntimeError("the session ended")
        assert (Path(cfg.run_dir) / "warm_start_was_here").exists(), (
            "the resumed attempt lost the first's work"
        )
        write_run(cfg, {"base": [False] * 4, "warmstart": [False] * 4, "final": [True] * 4}, [1.0, 1.0])
        return 0

    monkeypatch.setattr(launch.train, "train", fake_train)
    args = ["--seeds", "2", "--steps", "2", "--out", str(tmp_path)]
    bench = plan(parse_args([*args, "train.checkpoint_every=1"]))
    assert len(run_trials(bench, verbose=False)) == 2  # both killed after step 1
    assert json.loads((tmp_path / "grpo-s0" / STARTED).read_text())["config"]["seed"] == 0

    # The same trials planned again (checkpointing is not part of what a trial trains), except seed
    # 1's, whose interrupted attempt was another config's: that one starts afresh.
    started = tmp_path / "grpo-s1" / STARTED
    record = json.loads(started.read_text())
    record["config"]["learner"]["lr"] = 0.5
    started.write_text(json.dumps(record))
    attempts.clear()
    # Memory settings are not what a trial trains: one stopped out of memory goes on with them.
    resumed_with = [
        "train.checkpoint_every=1",
        "train.keep_checkpoints=3",
        "learner.gradient_checkpointing=true",
    ]
    again = plan(parse_args([*args, *resumed_with]))
    problems = run_trials(again, verbose=False)
    s0_checkpoint = step_dir(config_of(again, "grpo-s0").checkpoint_dir, 1)
    assert attempts == [("grpo-s0", s0_checkpoint), ("grpo-s1", None)]
    assert finished(config_of(again, "grpo-s0")) and finished(config_of(bench, "grpo-s0"))
    assert problems == ["grpo seed 1: RuntimeError: the session ended"]

    # A trial that kept no checkpoint starts afresh, as before.
    attempts.clear()
    plain = plan(parse_args(["--seeds", "1", "--steps", "2", "--out", str(tmp_path / "plain")]))
    run_trials(plain, verbose=False)
    run_trials(plain, verbose=False)
    assert attempts == [("grpo-s0", None), ("grpo-s0", None)]


def test_a_trial_planned_longer_goes_on_from_the_shorter_runs_last_step_and_keeps_its_final_eval(
    tmp_path, monkeypatch
):
    import launch.train
    from launch.bench.learning import run_trials
    from launch.bench.trial_files import STARTED, finished, recorded_trial
    from launch.checkpoints import Progress, step_dir, write_progress

    attempts = []

    async def fake_train(cfg, verbose=False):
        attempts.append((cfg.train.steps, cfg.train.resume))
        if cfg.train.resume is None:  # the shorter run: evals, a checkpoint per step, its final eval
            write_run(
                cfg,
                {"base": [False] * 4, "warmstart": [False] * 4, "final": [True, False, False, False]},
                [1.0],
            )
            append_rows(cfg.run_dir, {"phase": "eval/final", "step": 1, "success": 0.25})
            os.makedirs(step_dir(cfg.checkpoint_dir, 1))
            write_progress(step_dir(cfg.checkpoint_dir, 1), Progress(step=1, version=1, position=4))
            return 0
        folder = Path(cfg.run_dir, "trajectories")
        (folder / "eval_final.jsonl").write_bytes(
            b"".join(msgspec.json.encode(episode(t, True)) + b"\n" for t in TASKS)
        )
        append_rows(cfg.run_dir, {"phase": "train", "step": 2, "step_s": 2.0})
        return 0

    monkeypatch.setattr(launch.train, "train", fake_train)
    args = ["--seeds", "1", "--out", str(tmp_path), "train.checkpoint_every=1"]
    short = plan(parse_args([*args, "--steps", "1"]))
    assert run_trials(short, verbose=False) == [] and finished(config_of(short, "grpo-s0"))

    longer = plan(parse_args([*args, "--steps", "2"]))
    cfg = config_of(longer, "grpo-s0")
    assert run_trials(longer, verbose=False) == []
    assert attempts == [(1, None), (2, step_dir(cfg.checkpoint_dir, 1))]
    assert finished(cfg) and finished(config_of(short, "grpo-s0"))  # by the shorter one's kept record
    assert json.loads(Path(cfg.run_dir, STARTED).read_text())["config"]["train"]["steps"] == 2
    trial = read_run(cfg.run_dir, 2)
    assert trial.evals["step1"].step == 1 and trial.evals["step1"].per_task["success"][TASKS[0]] == 1.0
    assert trial.evals["final"].step == 2 and sum(trial.evals["final"].per_task["success"].values()) == 4
    assert trial.step_s == {1: 1.0, 2: 2.0}
    phases = [
        json.loads(line)["phase"] for line in Path(cfg.run_dir, "metrics.jsonl").read_text().splitlines()
    ]
    assert "eval/step1" in phases and "eval/final" not in phases  # the fake longer run logged no final row

    # Planned shorter again: the shorter trial's kept record is that trial, done; nothing is deleted.
    attempts.clear()
    again = plan(parse_args([*args, "--steps", "1"]))
    assert run_trials(again, verbose=False) == [] and attempts == []
    assert recorded_trial(config_of(again, "grpo-s0"), "grpo", 0).evals["final"].step == 1
    assert finished(cfg)


def test_a_plan_shorter_than_a_longer_run_of_its_trial_is_refused_not_run(tmp_path, monkeypatch):
    import launch.train
    from launch.bench.learning import run_trials
    from launch.bench.trial_files import mark_started
    from launch.checkpoints import Progress, step_dir, write_progress

    attempts = []

    async def fake_train(cfg, verbose=False):
        attempts.append((cfg.learner.lr, cfg.train.resume))

    monkeypatch.setattr(launch.train, "train", fake_train)
    longer = config_of(plan(parse_args(["--seeds", "1", "--steps", "2", "--out", str(tmp_path)])), "grpo-s0")
    write_trial(longer, {"base": [False] * 4, "warmstart": [False] * 4, "final": [True] * 4}, [1.0, 1.0])
    shorter = plan(parse_args(["--seeds", "1", "--steps", "1", "--out", str(tmp_path)]))
    (problem,) = run_trials(shorter, verbose=False)
    assert "holds this trial run for 2 steps" in problem and "trial.1steps.json" in problem
    assert attempts == [] and Path(longer.run_dir, DONE).is_file()

    # Nor an unfinished longer attempt that has a step checkpoint to go on from.
    Path(longer.run_dir, DONE).unlink()
    mark_started(longer, "abc")
    checkpoint = step_dir(longer.checkpoint_dir, 1)
    os.makedirs(checkpoint)
    write_progress(checkpoint, Progress(step=1, version=1, position=4))
    (problem,) = run_trials(shorter, verbose=False)
    assert f"unfinished attempt at this trial for 2 steps, to go on from {checkpoint}" in problem
    assert attempts == [] and os.path.isdir(checkpoint)
    again = plan(parse_args(["--seeds", "1", "--steps", "2", "--out", str(tmp_path)]))
    run_trials(again, verbose=False)  # planned as long as it was: it goes on from its checkpoint
    assert attempts == [(longer.learner.lr, checkpoint)]
    other = plan(parse_args(["--seeds", "1", "--steps", "1", "--out", str(tmp_path), "learner.lr=0.5"]))
    run_trials(other, verbose=False)  # another trial in that directory: run afresh, as before
    assert attempts == [(longer.learner.lr, checkpoint), (0.5, None)]


def test_lengthening_from_before_the_shorter_runs_last_step_drops_its_final_eval(tmp_path):
    from launch.bench.trial_files import lengthen

    cfg = load_run_config(None, [f"output_dir={tmp_path}", "train.steps=3"])
    write_run(
        cfg, {"warmstart": [False] * 4, "final": [True] * 4, "final_train": [True] * 4}, [1.0, 1.0, 1.0]
    )
    append_rows(cfg.run_dir, {"phase": "eval/final", "step": 3}, {"step": 3, "note": 1})
    Path(cfg.run_dir, DONE).write_text("{}")
    lengthen(cfg.run_dir, 3, resumed_at=2)  # step 3's checkpoint was never written
    assert sorted(os.listdir(Path(cfg.run_dir, "trajectories"))) == ["eval_warmstart.jsonl"]
    rows = [json.loads(line) for line in Path(cfg.run_dir, "metrics.jsonl").read_text().splitlines()]
    assert [r.get("phase") for r in rows] == ["eval/base", "train", "train", "train", None]
    assert not Path(cfg.run_dir, DONE).exists()
    assert Path(cfg.run_dir, "trial.3steps.json").read_text() == "{}"  # the shorter trial's record, kept
