#!/usr/bin/env bash
# Install everything a fresh CPU machine needs into ./.venv (idempotent; quick when already done).
#   bash scripts/setup.sh            # sim + train + vla + robot + dev extras
#   RLINF_EXTRAS=robot bash scripts/setup.sh   # e.g. a robot PC
set -euo pipefail
cd "$(dirname "$0")/.."

EXTRAS="${RLINF_EXTRAS:-sim,train,vla,robot,dev,bench,calibration,view,docs}"
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

if [[ ",$EXTRAS," == *",train,"* ]]; then
  bash scripts/install_torch.sh "$VENV"
fi
echo "[setup] installing rlinf[$EXTRAS] (editable)"
"${PIP[@]}" -e ".[$EXTRAS]" 2>&1 | grep -v "^WARNING: Location" || true
"$VENV/bin/python" -c "import protos" # fails loudly if the install did not work
echo "[setup] done: $VENV"
