#!/usr/bin/env bash
# A simulator suite whose pins clash with the main venv gets its own venv, beside it:
#   bash scripts/sim_venv.sh metaworld      # -> .venv-metaworld (metaworld pins mujoco==3.3.0)
# Training runs keep torch in the main venv and step the suite in workers started from this one:
#   .venv/bin/rlinf-trainer train --config ppo_metaworld env.python=.venv-metaworld/bin/python
# Idempotent; quick when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

SUITE="${1:?usage: scripts/sim_venv.sh SUITE (metaworld)}"
case "$SUITE" in
  metaworld) ;;
  *) echo "scripts/sim_venv.sh: unknown suite '$SUITE' (known: metaworld)" >&2; exit 2 ;;
esac
PYTHON="${PYTHON:-python3}"
VENV=".venv-$SUITE"
if [ ! -x "$VENV/bin/python" ]; then
  echo "[sim_venv] creating $VENV with $($PYTHON --version)"
  "$PYTHON" -m venv "$VENV"
fi
# The package itself, with the sim extra and the suite's: the workers import sim_envs from here.
"$VENV/bin/python" -m pip install --disable-pip-version-check -q -e ".[sim,$SUITE]" 2>&1 | grep -v "^WARNING: Location" || true
"$VENV/bin/python" -c "import sim_envs, $SUITE" # fails loudly if the install did not work
echo "[sim_venv] done: $VENV"
