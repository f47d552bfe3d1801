#!/usr/bin/env bash
# A simulator suite whose pins or weight do not belong in the main venv gets its own venv beside it:
#   bash scripts/sim_venv.sh metaworld      # -> .venv-metaworld (metaworld pins mujoco==3.3.0)
#   bash scripts/sim_venv.sh maniskill      # -> .venv-maniskill (mani-skill, SAPIEN, torch CPU; Vulkan)
#   bash scripts/sim_venv.sh libero         # -> .venv-libero (LIBERO on robosuite 1.4, MuJoCo < 4, its assets)
# Training runs keep the policy in the main venv and step the suite in workers started from this one:
#   .venv/bin/rlinf-trainer train --config ppo_metaworld env.python=.venv-metaworld/bin/python
# Idempotent; quick when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

SUITE="${1:?usage: scripts/sim_venv.sh SUITE (metaworld | maniskill | libero)}"
case "$SUITE" in
  metaworld) CHECK="import metaworld" ;;
  maniskill) CHECK="import mani_skill.envs" ;;
  libero) CHECK="from libero.libero import benchmark" ;;
  *) echo "scripts/sim_venv.sh: unknown suite '$SUITE' (known: metaworld, maniskill, libero)" >&2; exit 2 ;;
esac

if [ "$SUITE" = maniskill ]; then
  # SAPIEN renders (and builds every scene) through Vulkan; on a machine without a GPU that is Mesa's
  # lavapipe, which SAPIEN needs at >= 24.3: Debian 12 ships 22.3, its backports 25.
  if ! dpkg-query -W -f='${Version}' mesa-vulkan-drivers 2>/dev/null | grep -qE '^(2[5-9]|24[.][3-9])'; then
    SUDO=""
    [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1 && SUDO="sudo"
    codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    if [ "$codename" = bookworm ]; then
      echo "deb http://deb.debian.org/debian bookworm-backports main" | $SUDO tee /etc/apt/sources.list.d/rlinf-backports.list >/dev/null
      $SUDO apt-get update -qq
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq -t bookworm-backports mesa-vulkan-drivers libvulkan1 >/dev/null
    else
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq mesa-vulkan-drivers libvulkan1 >/dev/null
    fi
  fi
fi

PYTHON="${PYTHON:-python3}"
VENV=".venv-$SUITE"
if [ ! -x "$VENV/bin/python" ]; then
  echo "[sim_venv] creating $VENV with $($PYTHON --version)"
  "$PYTHON" -m venv "$VENV"
fi
[ "$SUITE" = maniskill ] && bash scripts/install_torch.sh "$VENV"  # before mani-skill pulls a CUDA build
# The package itself, with the sim extra and the suite's: the workers import sim_envs from here;
# record: `rlinf-trainer demos --python $VENV/bin/python` writes the suite's scripted demos from here.
"$VENV/bin/python" -m pip install --disable-pip-version-check -q -e ".[sim,record,$SUITE]" 2>&1 | grep -v "^WARNING: Location" || true
"$VENV/bin/python" -c "import sim_envs; $CHECK" # fails loudly if the install did not work
echo "[sim_venv] done: $VENV"
