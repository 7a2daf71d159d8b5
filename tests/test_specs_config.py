"""Run config: defaults are the demo, YAML and key.path=value overrides validate with clear messages."""

from __future__ import annotations

import ast
from pathlib import Path

import msgspec
import pytest

from specs.config import RunConfig, load_run_config, to_dict
from specs.errors import SpecError, SpecErrors

REPO = Path(__file__).resolve().parent.parent


def test_no_file_gives_the_defaults_and_derived_paths() -> None:
    cfg = load_run_config(None, [])
    assert cfg == RunConfig()
    assert cfg.domain.name == "calculator" and cfg.rollout.group_size == 4
    assert cfg.run_dir == "runs/demo"
    assert cfg.checkpoint_dir == "runs/demo/checkpoint"
    assert cfg.eval_max_turns == cfg.rollout.max_turns == 3


def test_the_shipped_demo_config_equals_the_defaults() -> None:
    assert load_run_config(REPO / "launch" / "configs" / "demo.yaml") == RunConfig()


def test_overrides_parse_values_as_yaml(tmp_path: Path) -> None:
    cfg = load_run_config(
        None,
        [
            "rollout.group_size=8",
            "learner.betas=[0.9, 0.95]",
            "wandb.entity=null",
            "train.eval_max_turns=5",
            "run_name=x1",
            "learner.checkpoint_dir=/ck",
        ],
    )
    assert cfg.rollout.group_size == 8
    assert cfg.learner.betas == (0.9, 0.95)
    assert cfg.wandb.entity is None
    assert cfg.eval_max_turns == 5
    assert cfg.run_dir == "runs/x1" and cfg.checkpoint_dir == "/ck"


def test_an_unknown_override_key_names_the_path_and_lists_valid_keys() -> None:
    with pytest.raises(SpecError) as info:
        load_run_config(None, ["rollout.grop_size=4"])
    assert info.value.where == "override 'rollout.grop_size=4'"
    assert "unknown key 'grop_size'" in info.value.message
    assert "valid keys at rollout: group_size, tasks_per_step" in info.value.message


def test_a_bad_override_type_names_the_field() -> None:
    with pytest.raises(SpecError) as info:
        load_run_config(None, ["rollout.max_turns=three"])
    assert info.value.where == "rollout.max_turns" and "Expected `int`, got `str`" in info.value.message


def test_a_literal_field_lists_its_choices() -> None:
    with pytest.raises(SpecError, match="expected one of: colocated, async"):
        load_run_config(None, ["placement=separate"])


def test_unknown_yaml_keys_are_all_reported_with_the_file(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("rollout:\n  group_size: 4\n  temprature: 0.7\nlearning_rate: 1e-5\n")
    with pytest.raises(SpecErrors) as info:
        load_run_config(path)
    assert [(p.file, p.where) for p in info.value.problems] == [
        (str(path), "rollout.temprature"),
        (str(path), "learning_rate"),
    ]
    assert "valid keys at top level: run_name, seed" in info.value.problems[1].message


@pytest.mark.parametrize(
    ("override", "why"),
    [
        ("rollout.group_size=1", "GRPO normalises rewards within a group"),
        ("rollout.acquire_workers=8", "must be >= rollout.acquire_workers"),
        ("rollout.max_new_tokens=2000", "one turn must fit in the context"),
        ("rollout.max_context_tokens=4096", "must be <= generator.max_model_len"),
        ("domain.expert=null", "needs domain.expert"),
        ("placement=async", None),
        ("max_staleness=-1", "max_staleness must be >= 0"),
        ("rollout.retries=-1", "rollout.retries must be >= 0"),
        ("train.checkpoint_every=-2", "train.checkpoint_every must be >= 0"),
        ("algorithm.tool_reward=true", None),
        ("algorithm.returns=adoption", None),
    ],
)
def test_validators_explain_why(override: str, why: str | None) -> None:
    if why is None:  # valid alone
        load_run_config(None, [override])
        return
    with pytest.raises(SpecError, match=why):
        load_run_config(None, [override])


def test_the_tool_reward_family_needs_outcome_returns() -> None:
    with pytest.raises(SpecError, match="algorithm.tool_reward needs algorithm.returns: outcome"):
        load_run_config(None, ["algorithm.tool_reward=true", "algorithm.returns=adoption"])


def test_to_dict_round_trips_for_logging() -> None:
    cfg = load_run_config(None, ["seed=7"])
    d = to_dict(cfg)
    assert d["seed"] == 7 and d["rollout"]["group_size"] == 4 and d["learner"]["betas"] == [0.9, 0.999]
    assert msgspec.convert(d, RunConfig) == cfg


def test_every_field_has_a_docstring() -> None:
    classes = [
        node
        for module in ("config.py", "algorithm.py")
        for node in ast.parse((REPO / "specs" / module).read_text()).body
        if isinstance(node, ast.ClassDef) and node.name.endswith("Config")
    ]
    assert len(classes) == 12
    for cls in classes:
        body = cls.body
        for i, node in enumerate(body):
            if isinstance(node, ast.AnnAssign):
                after = body[i + 1] if i + 1 < len(body) else None
                documented = isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                assert documented, f"{cls.name}.{ast.unparse(node.target)} has no docstring"
