#!/usr/bin/env bash
# A side venv with LeRobot's own dataset library and its async-inference robot client, for the
# round-trip check in tests/protos/test_lerobot_roundtrip.py and LeRobot's RobotClient in
# tests/integration/test_lerobot_protocol.py (Python >= 3.12, and they pull torch: ~8 GB, about
# 5 minutes here). Reused when it is already there.
#   bash scripts/lerobot_venv.sh          # -> .venv-lerobot
set -euo pipefail
cd "$(dirname "$0")/.."

# Another LeRobot side venv reuses this script: VENV, PINS (space-separated) and CHECK (a module
# to import) override the defaults (scripts/lerobot_vla_venv.sh).
VENV=${VENV:-.venv-lerobot}
read -r -a PINS <<< "${PINS:-lerobot-dataset==0.5.0 lerobot[async]==0.6.1}"
CHECK=${CHECK:-ledataset, lerobot.async_inference.configs, lerobot.transport.services_pb2_grpc}
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
