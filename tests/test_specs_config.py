"""Run config: defaults are the demo, YAML and key.path=value overrides validate with clear messages."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from specs.config import RunConfig, load_run_config, to_dict
from specs.errors import SpecError, SpecErrors

REPO = Path(__file__).resolve().parent.parent


def test_no_file_gives_the_defaults_and_derived_paths() -> None:
    cfg = load_run_config(None, [])
    assert cfg == RunConfig()
    assert cfg.domain.name == "calculator" and cfg.rollout.group_size == 8
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


def test_an_override_sets_one_entry_of_a_map_keeping_the_others(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("domain:\n  task_vars: {OWNER: acme}\n")
    cfg = load_run_config(path, ["domain.task_vars.JUDGE_MODEL=qwen", "domain.task_vars.PORT=8000"])
    assert cfg.domain.task_vars == {"OWNER": "acme", "JUDGE_MODEL": "qwen", "PORT": "8000"}
    with pytest.raises(SpecError, match="domain.task_vars is not a section; it has no key .X."):
        load_run_config(None, ["domain.task_vars.X.Y=1"])


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
        ("rollout.acquire_workers=17", "must be >= rollout.acquire_workers"),
        ("rollout.max_new_tokens=2000", "one turn must fit in the context"),
        ("rollout.max_context_tokens=4096", "must be <= generator.max_model_len"),
        ("domain.expert=null", "needs domain.expert"),
        ("placement=async", None),
        ("max_staleness=-1", "max_staleness must be >= 0"),
        ("rollout.retries=-1", "rollout.retries must be >= 0"),
        ("train.checkpoint_every=-2", "train.checkpoint_every must be >= 0"),
        ("train.eval_train_tasks=-1", "eval_train_tasks must be >= 0"),
        ("algorithm.tool_reward=true", None),
        ("algorithm.returns=adoption", None),
        ("env.node_groups={gpu: {backend: docker}}", "env.node_groups needs env.node_resource"),
        ("env.node_groups={gpu: {max_live: 0}}", "needs env.node_resource"),
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
    assert d["seed"] == 7 and d["rollout"]["group_size"] == 8 and d["learner"]["betas"] == [0.9, 0.999]
    assert msgspec.convert(d, RunConfig) == cfg


def test_every_field_has_a_docstring() -> None:
    classes = [
        node
        for module in ("config.py", "env_config.py", "algorithm.py")
        for node in ast.parse((REPO / "specs" / module).read_text()).body
        if isinstance(node, ast.ClassDef) and (node.name.endswith("Config") or node.name == "EnvNodeGroup")
    ]
    assert len(classes) == 13
    for cls in classes:
        body = cls.body
        for i, node in enumerate(body):
            if isinstance(node, ast.AnnAssign):
                after = body[i + 1] if i + 1 < len(body) else None
                documented = isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                assert documented, f"{cls.name}.{ast.unparse(node.target)} has no docstring"


# The spellings ML users write for a learning rate; PyYAML (YAML 1.1) reads the ones without a dot as strings.
FLOAT_SPELLINGS = [
    ("1e-5", 1e-5),
    ("1E-5", 1e-5),
    ("2e-5", 2e-5),
    ("1.0e-5", 1e-5),
    ("0.00001", 1e-5),
    ("5e-1", 0.5),
    ("1e3", 1000.0),
    ("1e+3", 1000.0),
    ("1E-05", 1e-5),
    (".5", 0.5),
    ("3", 3.0),
]


@pytest.mark.parametrize(("spelling", "value"), FLOAT_SPELLINGS)
def test_a_float_field_reads_each_numeric_spelling_from_a_yaml_file(
    tmp_path: Path, spelling: str, value: float
) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(f"learner: {{lr: {spelling}}}\nwarmstart:\n  lr: {spelling}\n")
    cfg = load_run_config(path)
    assert cfg.learner.lr == value and type(cfg.learner.lr) is float
    assert cfg.warmstart.lr == value and type(cfg.warmstart.lr) is float


@pytest.mark.parametrize(("spelling", "value"), FLOAT_SPELLINGS)
def test_a_float_field_reads_each_numeric_spelling_from_the_command_line(spelling: str, value: float) -> None:
    cfg = load_run_config(None, [f"learner.lr={spelling}"])
    assert cfg.learner.lr == value and type(cfg.learner.lr) is float


def test_a_negative_exponent_with_a_sign_reads_as_a_float() -> None:
    assert load_run_config(None, ["algorithm.tool_bonus=-1e-2"]).algorithm.tool_bonus == -0.01


def test_an_override_replaces_a_value_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("learner:\n  lr: 1e-5\n  micro_batch_size: 2\n")
    cfg = load_run_config(path, ["learner.lr=2e-5"])
    assert (cfg.learner.lr, cfg.learner.micro_batch_size) == (2e-5, 2)


def test_a_value_that_is_no_number_is_refused_naming_the_field_the_type_and_the_value(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        load_run_config(None, ["learner.lr=fast"])
    assert info.value.where == "learner.lr"
    assert info.value.message == "Expected `float`, got `str` ('fast')"
    path = tmp_path / "run.yaml"
    path.write_text("learner:\n  lr: 1e-5x\n")
    with pytest.raises(SpecError) as info:
        load_run_config(path)
    assert (info.value.file, info.value.where) == (str(path), "learner.lr")
    assert "Expected `float`, got `str` ('1e-5x')" in info.value.message


@pytest.mark.parametrize("value", ["nan", ".nan", "inf", "0", "-1e-5"])
def test_a_learning_rate_must_be_a_finite_positive_number(value: str) -> None:
    with pytest.raises(SpecError, match="learner.lr must be a finite number > 0"):
        load_run_config(None, [f"learner.lr={value}"])


def test_the_learning_rate_warms_up_linearly_over_the_first_rl_steps_then_stays() -> None:
    cfg = load_run_config(None, ["learner.lr=1e-4", "learner.warmup_steps=4"]).learner
    assert [cfg.lr_at(step) for step in range(1, 7)] == pytest.approx(
        [2.5e-5, 5e-5, 7.5e-5, 1e-4, 1e-4, 1e-4]
    )
    constant = load_run_config(None, ["learner.lr=1e-4"]).learner
    assert constant.warmup_steps == 0 and {constant.lr_at(step) for step in (1, 2, 50)} == {1e-4}
    with pytest.raises(ValueError, match="RL steps count from 1"):
        cfg.lr_at(0)
    with pytest.raises(SpecError, match="learner.warmup_steps must be >= 0, got -1"):
        load_run_config(None, ["learner.warmup_steps=-1"])


def test_an_int_field_takes_integral_spellings_and_refuses_fractions() -> None:
    cfg = load_run_config(None, ["train.steps=1e3", "rollout.max_turns=4.0", "seed=-3"])
    assert (cfg.train.steps, cfg.rollout.max_turns, cfg.seed) == (1000, 4, -3)
    assert type(cfg.train.steps) is int and type(cfg.rollout.max_turns) is int
    with pytest.raises(SpecError) as info:
        load_run_config(None, ["train.steps=2.5"])
    assert info.value.where == "train.steps" and info.value.message == "Expected `int`, got `float` (2.5)"


def test_ints_are_accepted_by_float_fields_as_floats(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("rollout:\n  tool_timeout_s: 30\nlearner:\n  betas: [1, 0.999]\n")
    cfg = load_run_config(path, ["rollout.temperature=1"])
    assert cfg.rollout.tool_timeout_s == 30.0 and type(cfg.rollout.tool_timeout_s) is float
    assert cfg.learner.betas == (1.0, 0.999) and cfg.rollout.temperature == 1.0


def test_bool_fields_take_true_and_false_and_refuse_other_words() -> None:
    cfg = load_run_config(None, ["env.reuse=false", "learner.gradient_checkpointing=true"])
    assert cfg.env.reuse is False and cfg.learner.gradient_checkpointing is True
    with pytest.raises(SpecError) as info:
        load_run_config(None, ["env.reuse=maybe"])
    assert info.value.where == "env.reuse" and "Expected `bool`, got `str` ('maybe')" in info.value.message


def test_a_text_field_keeps_text_that_looks_like_a_number(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("run_name: 1e5\nmodel:\n  path: 1.0e-5\n")  # 1.0e-5 is a YAML 1.1 float: quote it
    with pytest.raises(SpecError) as info:
        load_run_config(path)
    assert info.value.where == "model.path"
    assert info.value.message == "Expected `str`, got `float` (1e-05); quote the value to keep it as text"
    path.write_text("run_name: 1e5\nmodel:\n  path: '1.0e-5'\n")
    cfg = load_run_config(path)
    assert (cfg.run_name, cfg.model.path) == ("1e5", "1.0e-5")


def test_on_the_command_line_a_text_field_gets_the_text_typed() -> None:
    cfg = load_run_config(
        None, ["run_name=2024", "output_dir=1.0e-5", "domain.system_prompt=Answer: yes", "wandb.entity=007"]
    )
    assert (cfg.run_name, cfg.output_dir) == ("2024", "1.0e-5")
    assert cfg.domain.system_prompt == "Answer: yes" and cfg.wandb.entity == "007"
    assert load_run_config(None, ["domain.system_prompt=null"]).domain.system_prompt is None
    assert load_run_config(None, ["run_name='quoted'"]).run_name == "quoted"


def test_nested_overrides_reach_lists_and_optional_sections() -> None:
    cfg = load_run_config(
        None,
        [
            "learner.betas=[0.9, 1e-3]",
            "rollout.tool_budget_s=1e2",
            "rollout.observation_rule.keep_last_costly=2",
            "rollout.observation_rule.costly_chars=1e3",
            "train.curation_band=[1e-1, 9e-1]",
        ],
    )
    assert cfg.learner.betas == (0.9, 0.001) and cfg.rollout.tool_budget_s == 100.0
    assert cfg.rollout.observation_rule is not None
    assert (cfg.rollout.observation_rule.keep_last_costly, cfg.rollout.observation_rule.costly_chars) == (
        2,
        1000,
    )
    assert cfg.train.curation_band == (0.1, 0.9)
    with pytest.raises(SpecError) as info:
        load_run_config(None, ["learner.betas=[0.9, fast]"])
    assert info.value.where == "learner.betas[1]" and "got `str` ('fast')" in info.value.message
    with pytest.raises(SpecError, match="unknown key 'k'; valid keys at rollout.observation_rule: keep_last"):
        load_run_config(None, ["rollout.observation_rule.k=2"])


def test_parsing_a_training_command_line_imports_no_ml_library() -> None:
    code = (
        "import sys, contextlib, io\n"
        "sys.path.insert(0, 'launch')\n"
        "import train\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    train.main(['learner.lr=2e-5', '--help'])\n"
        "with contextlib.redirect_stderr(io.StringIO()) as err:\n"
        "    assert train.main(['learner.lr=fast']) == 2\n"
        "assert 'learner.lr' in err.getvalue(), err.getvalue()\n"
        "assert train.load_run_config(None, ['learner.lr=2e-5']).learner.lr == 2e-5\n"
        "heavy = {'torch', 'vllm', 'ray', 'transformers', 'deepspeed'} & set(sys.modules)\n"
        "assert not heavy, heavy"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr


def test_a_choice_field_reads_the_word_typed_and_lists_the_choices() -> None:
    with pytest.raises(SpecError) as info:
        load_run_config(None, ["placement=yes"])  # YAML 1.1 reads `yes` as true
    assert info.value.message == "Invalid enum value 'yes'; expected one of: colocated, async"
    assert load_run_config(None, ["algorithm.loss_agg=null"]).algorithm.loss_agg is None
    with pytest.raises(SpecError, match="expected one of: token-mean, seq-mean-token-mean"):
        load_run_config(None, ["algorithm.loss_agg=on"])


def test_starting_from_another_runs_warm_start_is_refused_with_a_resume_or_without_a_warm_start() -> None:
    assert load_run_config(None, ["warmstart.from_run=runs/first"]).warmstart.from_run == "runs/first"
    for other in ("train.resume=auto", "warmstart.enabled=false"):
        with pytest.raises(SpecError, match="warmstart.from_run starts a fresh run"):
            load_run_config(None, ["warmstart.from_run=runs/first", other])


def test_env_node_groups_set_the_backend_and_capacity_of_the_nodes_that_have_their_resource() -> None:
    cfg = load_run_config(
        None,
        [
            "env.node_resource=mcprl_env",
            "env.backend=bwrap",
            "env.node_groups={mcprl_docker: {backend: docker, docker_url: 'unix:///d.sock', max_live: 32}, big: {max_live: 64}}",
        ],
    ).env
    docker = cfg.on_node({"mcprl_env": 1, "mcprl_docker": 1, "big": 1})  # the first group it has wins
    assert (docker.backend, docker.docker_url, docker.max_live) == ("docker", "unix:///d.sock", 32)
    assert docker.provisioner_options() == {"base_url": "unix:///d.sock"}
    big = cfg.on_node({"mcprl_env": 1, "big": 1})
    assert (big.backend, big.docker_url, big.max_live) == ("bwrap", None, 64)
    assert cfg.on_node({"mcprl_env": 1}) == cfg and cfg.backends() == {"bwrap", "docker"}
    with pytest.raises(SpecError, match="node_groups.gpu.docker_url is set but its backend is not 'docker'"):
        load_run_config(None, ["env.node_resource=e", "env.node_groups={gpu: {docker_url: 'unix:///x'}}"])
    with pytest.raises(SpecError, match="node_groups.gpu.max_live must be >= 1"):
        load_run_config(None, ["env.node_resource=e", "env.node_groups={gpu: {max_live: 0}}"])
