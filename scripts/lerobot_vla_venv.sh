#!/usr/bin/env bash
# A side venv with LeRobot 0.6.1's π0 / π0.5 / SmolVLA (Python >= 3.12, PyPI's torch 2.11; ~8 GB,
# about 5 minutes here), for benchmarks/vla_inference.py's LeRobot row. Reused when it is there.
#   bash scripts/lerobot_vla_venv.sh          # -> .venv-lerobot-vla
set -euo pipefail
VENV=.venv-lerobot-vla PINS="lerobot[pi,smolvla]==0.6.1" CHECK=lerobot.policies.pi0.modeling_pi0 \
  exec bash "$(dirname "$0")/lerobot_venv.sh"
