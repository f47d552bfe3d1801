#!/usr/bin/env bash
# Install torch==2.13.0 into the venv at $1, the CPU build where PyTorch's CPU index is reachable.
# A bare torch requirement (and plain PyPI's torch==2.13.0) pulls the CUDA build and its nvidia
# packages (several GB). Prefer PyTorch's CPU wheel index where it is reachable; fall back to the
# plain pin (a GPU machine then gets the CUDA build, which is what it wants). RLINF_TORCH_INDEX=""
# skips the CPU index, e.g. on a GPU box. Does nothing where torch already imports.
set -euo pipefail
VENV="${1:?usage: scripts/install_torch.sh VENV}"
PIP=("$VENV/bin/python" -m pip install --disable-pip-version-check -q)
TORCH_INDEX="${RLINF_TORCH_INDEX-https://download.pytorch.org/whl/cpu}"
if ! "$VENV/bin/python" -c "import torch" >/dev/null 2>&1; then
  echo "[setup] installing torch==2.13.0 into $VENV${TORCH_INDEX:+ (CPU wheel from $TORCH_INDEX, else the plain pin)}"
  if [ -z "$TORCH_INDEX" ] || ! "${PIP[@]}" --index-url "$TORCH_INDEX" --extra-index-url https://pypi.org/simple \
      --timeout 15 --retries 1 "torch==2.13.0" 2>/dev/null; then
    "${PIP[@]}" "torch==2.13.0"
  fi
fi
