"""openpi's own client against a server, run in the openpi side venv (scripts/openpi_client_venv.sh).

    python openpi_client_peer.py URI OBSERVATIONS.npz OUT.npz [API_KEY]

OBSERVATIONS.npz holds ``keys.json`` (the observation dict's keys, each naming an array in the file or
holding a string) and the arrays; each observation goes through ``WebsocketClientPolicy.infer`` as a
robot running openpi's client sends it. OUT.npz gets each answer's ``actions``, stacked, and the
round-trip times; the server's metadata is printed as JSON. An error the server sends (openpi's
client raises it as RuntimeError) or a refused connection prints ``ERROR: ...`` and exits 3.
Nothing of rlinf is imported here: this is the robot's side.
"""

import json
import sys
import time

import numpy as np
from openpi_client.websocket_client_policy import WebsocketClientPolicy


def main() -> int:
    uri, observations_path, out_path = sys.argv[1:4]
    api_key = sys.argv[4] if len(sys.argv) > 4 else None
    stored = np.load(observations_path)
    layout = json.loads(bytes(stored["keys.json"]).decode())
    try:
        client = WebsocketClientPolicy(uri, api_key=api_key)
        print(json.dumps(client.get_server_metadata()), flush=True)
        actions, round_trips = [], []
        for observation in layout["observations"]:
            obs = {
                key: stored[value] if value in stored.files else value for key, value in observation.items()
            }
            started = time.perf_counter()
            answer = client.infer(obs)
            round_trips.append(time.perf_counter() - started)
            actions.append(answer["actions"])
    except Exception as exc:  # what the robot's side would see
        print(f"ERROR: {type(exc).__name__}: {exc}", flush=True)
        return 3
    np.savez(out_path, actions=np.stack(actions), round_trip_s=np.array(round_trips))
    return 0


if __name__ == "__main__":
    sys.exit(main())
