#!/usr/bin/env bash
# A side venv with openpi's own client (openpi-client 0.1.2 from PyPI pins numpy < 2, which the main
# venv is past; it imports typing_extensions without declaring it), for tests/integration/test_openpi_protocol.py and benchmarks/link_compare.py's row of
# openpi's client against our server. About 60 MB, under a minute. Reused when it is already there.
#   bash scripts/openpi_client_venv.sh          # -> .venv-openpi
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv-openpi}
PYTHON=${PYTHON:-python3}
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import openpi_client.websocket_client_policy" >/dev/null 2>&1; then
  echo "[$VENV] $VENV is ready"
  exit 0
fi
echo "[$VENV] creating $VENV with $("$PYTHON" --version) and openpi-client==0.1.2"
# Built aside and moved into place only once it works: a half-built venv is never taken for a ready one.
rm -rf "$VENV" "$VENV.partial"
"$PYTHON" -m venv "$VENV.partial"
"$VENV.partial/bin/python" -m pip install --disable-pip-version-check -q openpi-client==0.1.2 typing-extensions 2>&1 | grep -v "^WARNING: Location" || true
"$VENV.partial/bin/python" -c "import openpi_client.websocket_client_policy"  # fails loudly if the install did not work
mv "$VENV.partial" "$VENV"
"$VENV/bin/python" -c "import openpi_client.websocket_client_policy"
echo "[$VENV] done: $VENV"
