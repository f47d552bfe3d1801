#!/usr/bin/env bash
# A side venv with LeRobot 0.6.1's π0 / π0.5 / SmolVLA (Python >= 3.12, PyPI's torch 2.11; ~8 GB,
# about 5 minutes here), for benchmarks/vla_inference.py's LeRobot row. Reused when it is there.
#   bash scripts/lerobot_vla_venv.sh          # -> .venv-lerobot-vla
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv-lerobot-vla
PINS=("lerobot[pi,smolvla]==0.6.1")
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import lerobot.policies.pi0.modeling_pi0" >/dev/null 2>&1; then
  echo "[lerobot-vla-venv] $VENV is ready"
  exit 0
fi
FOUND=""
for candidate in "${PYTHON312:-}" python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python /usr/bin/python3.12; do
  if [ -n "$candidate" ] && "$candidate" -c 'import sys; assert sys.version_info >= (3, 12)' >/dev/null 2>&1; then
    FOUND="$candidate"
    break
  fi
done
if [ -z "$FOUND" ]; then
  echo "[lerobot-vla-venv] no Python >= 3.12 found (set PYTHON312=...)" >&2
  exit 1
fi
PYTHON312="$FOUND"
echo "[lerobot-vla-venv] creating $VENV with $("$PYTHON312" --version) and ${PINS[*]}"
# Built aside and moved into place only once it works: a half-built venv is never taken for a ready one.
rm -rf "$VENV" "$VENV.partial"
"$PYTHON312" -m venv "$VENV.partial"
"$VENV.partial/bin/python" -m pip install --disable-pip-version-check -q "${PINS[@]}" 2>&1 | grep -v "^WARNING: Location" || true
"$VENV.partial/bin/python" -c "import lerobot.policies.pi0.modeling_pi0" # fails loudly if the install did not work
mv "$VENV.partial" "$VENV"
"$VENV/bin/python" -c "import lerobot.policies.pi0.modeling_pi0"
echo "[lerobot-vla-venv] done: $VENV"
