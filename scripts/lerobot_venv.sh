#!/usr/bin/env bash
# A side venv with LeRobot's own code (Python >= 3.12; it pulls torch: ~8 GB, about 5 minutes here),
# reused when it is already there, for:
# - its dataset library: the round-trip check in tests/protos/test_lerobot_roundtrip.py;
# - its async-inference RobotClient: tests/integration/test_lerobot_protocol.py;
# - its π0 / π0.5 / SmolVLA: tests/policies/test_lerobot_vla_reload.py (our exports, loaded by
#   LeRobot's classes) and the LeRobot row of benchmarks/vla_inference.py.
#   bash scripts/lerobot_venv.sh          # -> .venv-lerobot
set -euo pipefail
cd "$(dirname "$0")/.."

# VENV, PINS (space-separated) and CHECK (modules to import) override the defaults.
VENV=${VENV:-.venv-lerobot}
read -r -a PINS <<< "${PINS:-lerobot-dataset==0.5.0 lerobot[async,pi,smolvla]==0.6.1}"
CHECK=${CHECK:-ledataset, lerobot.async_inference.configs, lerobot.transport.services_pb2_grpc, lerobot.policies.pi0.modeling_pi0, lerobot.policies.pi05.modeling_pi05, lerobot.policies.smolvla.modeling_smolvla}
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import $CHECK" >/dev/null 2>&1; then
  echo "[$VENV] $VENV is ready"
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
  echo "[$VENV] no Python >= 3.12 found (set PYTHON312=...)" >&2
  exit 1
fi
PYTHON312="$FOUND"
echo "[$VENV] creating $VENV with $("$PYTHON312" --version) and ${PINS[*]}"
# Built aside and moved into place only once it works: a half-built venv is never taken for a ready one.
rm -rf "$VENV" "$VENV.partial"
"$PYTHON312" -m venv "$VENV.partial"
"$VENV.partial/bin/python" -m pip install --disable-pip-version-check -q "${PINS[@]}" 2>&1 | grep -v "^WARNING: Location" || true
"$VENV.partial/bin/python" -c "import $CHECK" # fails loudly if the install did not work
mv "$VENV.partial" "$VENV"
"$VENV/bin/python" -c "import $CHECK"
echo "[$VENV] done: $VENV"
