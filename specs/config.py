"""Run configuration: frozen msgspec Structs loaded from YAML, overridable as ``key.path=value``.

``load_run_config(None, [])`` is the embedded demo (every default). Values are read as their field's
type (``lr: 1e-5`` and ``learner.lr=2e-5`` are floats; ``specs/config_loading.py``). Unknown keys are
refused with the valid keys at that level; wrong values and failed validators are refused with the
file and the field. Validators live next to the fields they guard and say why the constraint exists. This module
imports no ML library, so launchers can parse (and refuse) a config before importing torch.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any, Literal

import msgspec

from specs.algorithm import GrpoConfig
from specs.config_loading import load_config
from specs.env_config import EnvPoolConfig
from specs.observation_rule import ObservationRule


class DomainConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: str = "calculator"
    """Domain name, used in logs and run names."""
    tasks: str = "specs/domains/calculator/tasks/train.json"
    """Training task file (MCP-Universe task format), relative to the working directory."""
    eval_tasks: str = "specs/domains/calculator/tasks/eval.json"
    """Held-out evaluation task file."""
    servers: str = "specs/domains/calculator/servers.json"
    """Server list (MCP-Universe ``server_list.json`` shape) naming how to start each MCP server."""
    hook_modules: tuple[str, ...] = ("specs.domains.calculator.hooks",)
    """Modules whose registered prepare/cleanup/evaluator functions the tasks may name."""
    system_prompt: str | None = None
    """System prompt override; ``None`` uses the agent loop's default."""
    expert: str | None = "specs.domains.calculator.expert:respond"
    """Import string of the scripted expert (``respond(task, conversation) -> str``) for the warm start."""
    task_vars: dict[str, str] = msgspec.field(default_factory=dict)
    """Values of the ``{{VAR}}`` templates in the task files (``specs.templates``); a variable not
    given here is read from the process environment."""
    gui_servers: tuple[str, ...] = ()
    """Servers through which the agent acts on a GUI (a browser): their calls are GUI actions, not
    tool use, in the adoption metrics (``policies.metrics``: ``gui_step_share``; paper 002)."""


class ModelConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    path: str = ".cache/models/SmolLM2-135M-Instruct"
    """Hugging Face model directory (config, tokenizer, weights)."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """Weights dtype for generator and learner; float32 keeps train/inference logprobs equal on CPU."""


class RolloutConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    group_size: int = 8
    """Trajectories per task; GRPO normalises rewards within each group."""
    tasks_per_step: int = 4
    """Tasks (groups) per training step."""
    acquire_workers: int = 4
    """Concurrent environment acquisitions (create/reset + prepare hooks)."""
    run_workers: int = 16
    """Concurrent agent episodes."""
    eval_workers: int = 2
    """Concurrent evaluations (evaluators + cleanup hooks)."""
    max_turns: int = 3
    """Most model turns per episode."""
    max_new_tokens: int = 96
    """Most tokens the model generates in one turn."""
    temperature: float = 0.8
    """Sampling temperature during training rollouts (the learner's logprobs, like the engine's
    recorded ones, are of the untempered policy)."""
    top_p: float = 1.0
    """Nucleus sampling mass during training rollouts."""
    tool_timeout_s: float = 10.0
    """Deadline of one tool call; the call is cancelled and its process killed past it."""
    max_context_tokens: int = 1024
    """Most tokens of one whole conversation; the episode ends truncated beyond it."""
    tool_budget_s: float | None = None
    """Total tool time of one episode: each call's deadline is cut to what is left, and calls past
    it are refused (``budget_exhausted``); ``null``: only the per-call deadline."""
    route_tool: bool = False
    """Give the agent the built-in ``route`` tool: BM25 search over the environment's tools."""
    reasoning_format: Literal["none", "think", "harmony"] = "none"
    """Thought-MDP turns (``policies/thought.py``): ``think`` asks the model to reason inside
    ``<think></think>`` before each action; ``harmony`` reads gpt-oss analysis channels. Either
    records the reasoning mask that ``algorithm.attribution: masked`` and the reasoning reward use."""
    tools_top_k: int | None = None
    """Show the agent only the ``k`` tools retrieved for the task's instruction (plus ``route``;
    any other tool it finds stays callable); ``null``: show every tool."""
    retries: int = 1
    """How often a trajectory lost to infrastructure (a server, environment or generator died) is
    run again on a fresh environment before its group is dropped whole."""
    group_timeout_s: float | None = None
    """A group not complete by then (retries included) is dropped whole; ``null``: no deadline."""
    observation_rule: ObservationRule | None = None
    """What of past tool observations the agent sees (paper 002, Eqs. 1-2; ``policies/observations.py``):
    ``{keep_last_costly: k, costly_chars: 1500, placeholder_after_success: bool}``. Applied at every
    step, logged with the trajectory and replayed token for token before training and by
    ``launch/eval.py``; ``null``: every observation in full."""
    keep_images: bool = False
    """Keep the images tool results return (screenshots) in the trajectories, by hash
    (``ToolCallRecord.images``, files in ``trajectories/images/``). A vision-language policy (a
    ``model.path`` whose config has a ``vision_config``) sees them as images; a text policy reads a
    placeholder for each. Off: the gateway drops them for a placeholder that says so."""
    max_episode_images: int | None = None
    """With ``keep_images``: the images kept per episode; later ones are placeholders that say the
    episode's cap is reached (the gateway also keeps at most 4 per result). ``null``: no cap. A
    vision-language policy's engine takes this many images per prompt (8 when ``null``)."""

    def gateway_options(self) -> dict[str, object]:
        """The per-episode options of ``McpGateway.open``."""
        return {"budget_s": self.tool_budget_s, "route": self.route_tool, "top_k": self.tools_top_k}

    def __post_init__(self) -> None:
        if self.group_size < 2:
            raise ValueError(
                "rollout.group_size must be >= 2: GRPO normalises rewards within a group, "
                "and a group of one has no baseline (its advantage is always 0)"
            )
        for name in ("tasks_per_step", "acquire_workers", "run_workers", "eval_workers", "max_turns"):
            if getattr(self, name) < 1:
                raise ValueError(f"rollout.{name} must be >= 1")
        if self.run_workers < self.acquire_workers:
            raise ValueError(
                f"rollout.run_workers ({self.run_workers}) must be >= rollout.acquire_workers "
                f"({self.acquire_workers}): acquired environments would queue up idle, holding memory"
            )
        if not 0 < self.max_new_tokens < self.max_context_tokens:
            raise ValueError(
                f"rollout.max_new_tokens ({self.max_new_tokens}) must be > 0 and < rollout.max_context_tokens "
                f"({self.max_context_tokens}): one turn must fit in the context with the prompt"
            )
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise ValueError("rollout.temperature must be >= 0 and rollout.top_p in (0, 1]")
        if self.tool_timeout_s <= 0:
            raise ValueError("rollout.tool_timeout_s must be > 0: every tool call needs a deadline")
        if self.tool_budget_s is not None and self.tool_budget_s <= 0:
            raise ValueError("rollout.tool_budget_s must be > 0 seconds, or null for no episode budget")
        if self.retries < 0:
            raise ValueError("rollout.retries must be >= 0 (0: a lost trajectory drops its group at once)")
        if self.group_timeout_s is not None and self.group_timeout_s <= 0:
            raise ValueError("rollout.group_timeout_s must be > 0 seconds, or null for no deadline")
        if self.tools_top_k is not None and self.tools_top_k < 1:
            raise ValueError("rollout.tools_top_k must be >= 1, or null to show every tool")


class GeneratorConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    max_model_len: int = 2048
    """vLLM context length; must hold rollout.max_context_tokens."""
    kv_cache_gib: int = 1
    """KV cache size on CPU (``VLLM_CPU_KVCACHE_SPACE``)."""
    enforce_eager: bool = True
    """Skip graph capture: faster start, and CPU runs gain nothing from it."""
    max_num_seqs: int = 32
    """Most sequences vLLM batches at once."""
    gpu_memory_utilization: float = 0.4
    """Share of GPU memory vLLM may take (GPU only); the rest stays for the colocated learner."""
    max_restarts: int = 3
    """How often Ray restarts a dead generator process (re-synced to the latest weights before it
    serves again; the episodes it was serving are retried)."""

    def __post_init__(self) -> None:
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError("generator.gpu_memory_utilization must be in (0, 1]")
        if self.max_restarts < 0:
            raise ValueError("generator.max_restarts must be >= 0")


class LearnerConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    lr: float = 2e-5
    """AdamW learning rate for RL updates."""
    warmup_steps: int = 0
    """RL steps over which the learning rate rises linearly to ``lr`` (step s of them trains at
    ``lr * s / warmup_steps``; see ``lr_at``); 0 keeps it constant. Fresh AdamW moments make the
    first updates sign-like (each weight moves by about ``lr``), which a warmup tempers."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW betas."""
    grad_clip: float = 1.0
    """Gradient norm clip."""
    micro_batch_size: int = 4
    """Sequences per forward/backward pass."""
    zero_stage: int = 0
    """DeepSpeed ZeRO stage (0 on CPU)."""
    gradient_checkpointing: bool = False
    """Recompute activations in backward to save memory."""
    checkpoint_dir: str | None = None
    """Where checkpoints go; ``None`` means ``<output_dir>/<run_name>/checkpoint``."""
    epochs_per_step: int = 1
    """Passes over each step's batch."""

    def __post_init__(self) -> None:
        if self.zero_stage not in (0, 1, 2, 3):
            raise ValueError(f"learner.zero_stage must be 0, 1, 2 or 3, got {self.zero_stage}")
        if not 0 < self.lr < math.inf:  # written so that NaN fails too
            raise ValueError(f"learner.lr must be a finite number > 0, got {self.lr}")
        if self.micro_batch_size < 1 or self.epochs_per_step < 1:
            raise ValueError("learner.micro_batch_size and learner.epochs_per_step must be >= 1")
        if self.warmup_steps < 0:
            raise ValueError(f"learner.warmup_steps must be >= 0, got {self.warmup_steps}")

    def lr_at(self, step: int) -> float:
        """The learning rate of RL step ``step`` (1-based, as the driver counts, so a resumed run
        continues the schedule): ``lr * min(1, step / warmup_steps)``, or ``lr`` without warmup."""
        if step < 1:
            raise ValueError(f"RL steps count from 1, got {step}")
        return self.lr * min(1.0, step / self.warmup_steps) if self.warmup_steps else self.lr


class WarmStartConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    enabled: bool = True
    """Supervised warm start on expert demonstrations before RL (the base model never calls tools)."""
    demonstrations: int = 16
    """Expert trajectories to train on; few, to leave RL headroom."""
    epochs: int = 1
    """Passes over the demonstrations."""
    lr: float = 5e-5
    """Learning rate of the warm start."""
    batch_size: int = 4
    """Demonstrations per optimizer step."""
    reset_optimizer: bool = True
    """Start the RL updates from fresh AdamW moments and step count, as two-stage (SFT, then RL)
    recipes do, so that RL's steps are RL's own. ``false``: RL goes on with the warm start's
    moments, and its first updates mostly continue the last demonstrations' momentum (BENCHMARKS.md,
    apps at 8 tasks a step, "Where the drift came from"; ``python -m launch.bench.warmstart_momentum``
    measures it; ``--ablation optimizer_reset`` compares the two). A kept warm start (``save``) keeps
    its moments; a run starting from it (``from_run``) resets them or not by its own setting."""
    save: bool = False
    """Keep the warm start in ``<run_dir>/warmstart/`` (the learner's checkpoint and the task
    position), for other runs to start from (``from_run``)."""
    from_run: str | None = None
    """The run directory of an earlier run that saved its warm start (``save``): start the RL steps
    from it, its base and warm-start evaluations reported as this run's, instead of running them
    again. Several RL configurations compared from one warm start differ only by their RL; the
    runs must share the model, the warm start and the eval tasks (checked)."""

    def __post_init__(self) -> None:
        if self.demonstrations < 1 or self.epochs < 1 or self.batch_size < 1:
            raise ValueError("warmstart: demonstrations, epochs and batch_size must be >= 1")
        if not 0 < self.lr < math.inf:  # written so that NaN fails too
            raise ValueError(f"warmstart.lr must be a finite number > 0, got {self.lr}")


class TrainConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    steps: int = 10
    """RL steps (rollout + update)."""
    eval_every: int = 0
    """Evaluate every N steps; 0 means only before the first and after the last step."""
    eval_tasks_limit: int = 48
    """Most eval tasks per evaluation."""
    eval_max_turns: int | None = None
    """Turn limit in evaluation; ``None`` means rollout.max_turns."""
    eval_samples: int = 0
    """Besides the greedy episode, this many episodes per eval task sampled at rollout.temperature
    (logged as ``eval_sampled/<phase>``); 0: greedy only."""
    eval_train_tasks: int = 0
    """Also evaluate the starting policy (warm start, else base) and the final one greedily on this
    many training tasks, the first of the pool (``curation_pool``'s tasks when set), as the evals
    ``<start>_train`` and ``final_train``: whether RL learns the tasks it trains on, apart from
    whether that carries over to the eval tasks. 0: none."""
    eval_observation_rule: ObservationRule | None = None
    """The observation rule of evaluations when it differs from training's (``null``:
    rollout.observation_rule): a policy trained on full observations evaluated under a compressing
    rule is paper 002's mismatched arm (``launch/bench/learning.py --ablation observation_rule``)."""
    curation_samples: int = 0
    """Gradient-band curation (tool-adoption paper, §5.1): sample each training task this many times
    (G, at rollout.temperature) to profile its pass rate, and train only on tasks whose rate lies
    strictly inside ``curation_band``; 0: no curation."""
    curation_band: tuple[float, float] = (0.1, 0.9)
    """Pass rates kept (open interval)."""
    curation_every: int | None = None
    """Re-profile every N steps; ``null``: profile once, before the first step."""
    curation_pool: int | None = None
    """Profile and train on only the first N training tasks (profiling costs N x G episodes)."""
    checkpoint_every: int = 0
    """Checkpoint every N steps under ``<checkpoint_dir>/step-NNNN`` (learner state, policy version,
    task-stream position, curation state); 0: only the final checkpoint."""
    keep_checkpoints: int = 2
    """Step checkpoints kept (the oldest are removed)."""
    resume: str | None = None
    """Resume from a step checkpoint directory, or ``auto``: the latest one under checkpoint_dir
    (a fresh start if there is none). The run continues at the next step with the same data order."""

    def __post_init__(self) -> None:
        if (
            min(self.steps, self.eval_every, self.eval_samples, self.eval_train_tasks) < 0
            or self.eval_tasks_limit < 1
        ):
            raise ValueError(
                "train: steps, eval_every, eval_samples and eval_train_tasks must be >= 0, eval_tasks_limit >= 1"
            )
        if self.curation_samples < 0 or (self.curation_pool is not None and self.curation_pool < 1):
            raise ValueError("train.curation_samples must be >= 0 and train.curation_pool >= 1 (or null)")
        if self.curation_every is not None and self.curation_every < 1:
            raise ValueError("train.curation_every must be >= 1, or null to profile once")
        if self.checkpoint_every < 0 or self.keep_checkpoints < 1:
            raise ValueError("train.checkpoint_every must be >= 0 and train.keep_checkpoints >= 1")
        low, high = self.curation_band
        if not 0 <= low < high <= 1:
            raise ValueError(
                f"train.curation_band must be (low, high) with 0 <= low < high <= 1, got {self.curation_band}"
            )


class WandbConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    project: str = "mcprl"
    """W&B project."""
    entity: str | None = None
    """W&B entity (team or user); ``None`` is the account default."""
    mode: Literal["offline", "online", "disabled"] = "offline"
    """``offline`` writes under ``wandb/`` for a later ``wandb sync``."""
    tags: tuple[str, ...] = ()
    """Tags on the run."""
    group: str | None = None
    """W&B run group (the learning bench groups its trials' runs with its own)."""


class RayConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    address: str | None = None
    """Cluster address (``ray.init(address=...)``); ``None`` is Ray's own lookup: ``RAY_ADDRESS``
    (set for a `ray job submit` entrypoint), else a cluster `ray start` left running on this machine
    (its address in ``/tmp/ray/ray_current_cluster``), else a new local Ray; ``"local"`` always
    starts a new local Ray."""
    num_cpus: int | None = None
    """CPUs of the local Ray; ``None`` lets Ray detect them."""


class RunConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    run_name: str = "demo"
    """Name of the run: output subdirectory and W&B run name."""
    seed: int = 0
    """Seed of task sampling and of everything seeded."""
    output_dir: str = "runs"
    """Root directory of run outputs."""
    domain: DomainConfig = msgspec.field(default_factory=DomainConfig)
    """Tasks, servers and hooks of the domain."""
    mix: tuple[DomainConfig, ...] = ()
    """A run over several domains (``launch/configs/mixed.yaml``): each entry's tasks, servers,
    hooks, expert and task_vars, as ``domain`` gives them for one. The run draws from all of their
    tasks, interleaved, and reports eval metrics per domain (``<name>/success``...); ``domain.name``
    and ``domain.system_prompt`` still name and prompt the run. Empty: ``domain`` alone."""
    model: ModelConfig = msgspec.field(default_factory=ModelConfig)
    """Policy model."""
    env: EnvPoolConfig = msgspec.field(default_factory=EnvPoolConfig)
    """Environment pool."""
    rollout: RolloutConfig = msgspec.field(default_factory=RolloutConfig)
    """Rollout pipeline and sampling."""
    generator: GeneratorConfig = msgspec.field(default_factory=GeneratorConfig)
    """vLLM engine."""
    learner: LearnerConfig = msgspec.field(default_factory=LearnerConfig)
    """DeepSpeed learner."""
    algorithm: GrpoConfig = msgspec.field(default_factory=GrpoConfig)
    """RL algorithm."""
    warmstart: WarmStartConfig = msgspec.field(default_factory=WarmStartConfig)
    """Supervised warm start."""
    train: TrainConfig = msgspec.field(default_factory=TrainConfig)
    """Training loop."""
    placement: Literal["colocated", "async"] = "colocated"
    """``colocated``: generator and learner share devices and alternate (on GPU the engine sleeps
    while the learner trains). ``async``: they run at once on separate devices (separate processes
    on CPU); rollouts of the next step are sampled while the learner trains, at most
    ``max_staleness`` published policies old (``actors/orchestrator.py``)."""
    max_staleness: int = 1
    """``async`` only: how many published policies (one a step, whatever
    ``learner.epochs_per_step``) behind the learner a trained turn may be (1: one-step
    off-policy). Colocated is 0 by construction."""
    wandb: WandbConfig = msgspec.field(default_factory=WandbConfig)
    """Weights & Biases logging."""
    ray: RayConfig = msgspec.field(default_factory=RayConfig)
    """Ray cluster."""

    def __post_init__(self) -> None:
        if self.warmstart.enabled and not all(d.expert for d in self.domains):
            where = "an expert for every mix entry" if self.mix else "domain.expert"
            raise ValueError(
                f"warmstart.enabled needs {where}: the demonstrations come from the scripted expert"
            )
        names = [d.name for d in self.mix]
        if len(set(names)) != len(names):
            raise ValueError(f"mix: each domain needs a name of its own, got {names}")
        if (
            self.algorithm.reasoning_reward or self.algorithm.surgery
        ) and self.rollout.reasoning_format == "none":
            raise ValueError(
                "algorithm.reasoning_reward and algorithm.surgery need rollout.reasoning_format "
                "(think or harmony): without explicit reasoning there is no reasoning family to score"
            )
        if self.max_staleness < 0:
            raise ValueError("max_staleness must be >= 0 (0 makes async placement alternate like colocated)")
        if self.warmstart.from_run is not None and (
            self.train.resume is not None or not self.warmstart.enabled
        ):
            raise ValueError(
                "warmstart.from_run starts a fresh run from another run's warm start: it needs "
                "warmstart.enabled and no train.resume (a resumed run has its own warm start already)"
            )
        if self.algorithm.tool_reward and self.algorithm.returns != "outcome":
            raise ValueError(
                "algorithm.tool_reward needs algorithm.returns: outcome (adoption returns are built "
                "from the outcome and the tool bonus, not from per-trajectory tool rewards)"
            )
        if self.rollout.max_context_tokens > self.generator.max_model_len:
            raise ValueError(
                f"rollout.max_context_tokens ({self.rollout.max_context_tokens}) must be <= "
                f"generator.max_model_len ({self.generator.max_model_len}): the engine cannot hold a longer conversation"
            )

    @property
    def domains(self) -> tuple[DomainConfig, ...]:
        """The domains the run draws tasks from: ``mix``, or ``domain`` alone."""
        return self.mix or (self.domain,)

    @property
    def gui_servers(self) -> frozenset[str]:
        """Every domain's GUI servers (``DomainConfig.gui_servers``)."""
        return frozenset(g for d in self.domains for g in d.gui_servers)

    @property
    def hook_modules(self) -> tuple[str, ...]:
        """Every domain's hook modules, each once, in order."""
        return tuple(dict.fromkeys(m for d in self.domains for m in d.hook_modules))

    @property
    def run_dir(self) -> str:
        """``<output_dir>/<run_name>``."""
        return os.path.join(self.output_dir, self.run_name)

    @property
    def staleness(self) -> int:
        """The staleness bound the orchestrator enforces: 0 when colocated."""
        return self.max_staleness if self.placement == "async" else 0

    @property
    def checkpoint_dir(self) -> str:
        """learner.checkpoint_dir, or ``<run_dir>/checkpoint`` when unset."""
        return self.learner.checkpoint_dir or os.path.join(self.run_dir, "checkpoint")

    @property
    def eval_max_turns(self) -> int:
        """train.eval_max_turns, or rollout.max_turns when unset."""
        return self.train.eval_max_turns or self.rollout.max_turns


def load_run_config(path: str | os.PathLike[str] | None, overrides: Sequence[str] = ()) -> RunConfig:
    """Load a YAML run config (``None``: all defaults), apply ``key.path=value`` overrides, validate.

    Values are read as their field's type (``lr: 1e-5`` is a float): see ``specs.config_loading``.
    """
    return load_config(RunConfig, path, overrides)


def to_dict(cfg: RunConfig) -> dict[str, Any]:
    """Plain nested dict of the config (for W&B config logging and the run directory)."""
    out: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(cfg))  # tuples become lists: JSON-safe
    return out
