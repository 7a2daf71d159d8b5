#!/usr/bin/env bash
# The tool-bonus comparison of the tool-adoption paper on the CPU demo: two short runs with the
# adoption returns (eqs. 3-4), the dense tool bonus on (lambda_mcp = 0.1) and off, same seed and
# data, each evaluated greedily before and after training (eval/base, eval/warmstart, eval/final).
#   bash launch/bench/tool_bonus.sh [extra key=value overrides...]
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p runs/tool_bonus
export WANDB_MODE=${WANDB_MODE:-offline}
common=(algorithm.returns=adoption train.steps=4 warmstart.demonstrations=16 warmstart.epochs=1
        train.eval_tasks_limit=16 output_dir=runs/tool_bonus "$@")
for bonus in 0.1 0.0; do
    .venv/bin/python launch/train.py "${common[@]}" algorithm.tool_bonus=$bonus run_name=bonus-$bonus \
        | tee "runs/tool_bonus/bonus-$bonus.log"
done
# Greedy eval rows of both runs (success, tool adoption, valid first call) side by side:
grep -h "^eval/\|^train:" runs/tool_bonus/bonus-*.log
