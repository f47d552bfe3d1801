#!/usr/bin/env bash
# Install everything a fresh CPU machine needs into ./.venv (idempotent; quick when already done).
#   bash scripts/setup.sh            # sim + train + vla + robot + dev extras
#   RLINF_EXTRAS=robot bash scripts/setup.sh   # e.g. a robot PC
set -euo pipefail
cd "$(dirname "$0")/.."

EXTRAS="${RLINF_EXTRAS:-sim,train,vla,robot,dev,bench,calibration,view}"
PYTHON="${PYTHON:-python3}"
VENV=.venv

# Headless OpenGL for MuJoCo's offscreen rendering (EGL, with OSMesa as the fallback).
APT_PACKAGES=(libegl1 libgl1 libosmesa6)
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ] && command -v apt-get >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1 && SUDO="sudo"
  echo "[setup] apt-get install ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "[setup] creating $VENV with $($PYTHON --version)"
  "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip install --disable-pip-version-check -q)

# A bare torch requirement (and plain PyPI's torch==2.13.0) pulls the CUDA build and its nvidia
# packages (several GB). Prefer PyTorch's CPU wheel index where it is reachable; fall back to the
# plain pin (a GPU machine then gets the CUDA build, which is what it wants). RLINF_TORCH_INDEX=""
# skips the CPU index, e.g. on a GPU box.
TORCH_INDEX="${RLINF_TORCH_INDEX-https://download.pytorch.org/whl/cpu}"
if [[ ",$EXTRAS," == *",train,"* ]] && ! "$VENV/bin/python" -c "import torch" >/dev/null 2>&1; then
  echo "[setup] installing torch==2.13.0${TORCH_INDEX:+ (CPU wheel from $TORCH_INDEX, else the plain pin)}"
  if [ -z "$TORCH_INDEX" ] || ! "${PIP[@]}" --index-url "$TORCH_INDEX" --extra-index-url https://pypi.org/simple \
      --timeout 15 --retries 1 "torch==2.13.0" 2>/dev/null; then
    "${PIP[@]}" "torch==2.13.0"
  fi
fi
echo "[setup] installing rlinf[$EXTRAS] (editable)"
"${PIP[@]}" -e ".[$EXTRAS]" 2>&1 | grep -v "^WARNING: Location" || true
"$VENV/bin/python" -c "import protos" # fails loudly if the install did not work
echo "[setup] done: $VENV"
