"""openpi's link, as its users run it: ``openpi_client.WebsocketClientPolicy`` against a server speaking
its protocol (websocket, msgpack with numpy arrays; the server sends its metadata first, then answers
every packed observation with a packed action dict). Run inside the peer's own venv by
``benchmarks/link_compare.py``; prints one JSON line of lockstep round-trip samples in ms.

    python openpi_peer.py serve PORT_FILE
    python openpi_peer.py client PORT N WARMUP [HZ]    # HZ > 0: one request per tick, as a robot sends
"""

from __future__ import annotations

import json
import sys
import time


def serve(port_file: str) -> None:
    import numpy as np
    import websockets.sync.server
    from openpi_client import msgpack_numpy

    actions = {"actions": np.zeros((50, 7), np.float32)}

    def handler(conn) -> None:
        packer = msgpack_numpy.Packer()
        conn.send(packer.pack({"peer": "openpi"}))
        while True:
            try:
                obs = msgpack_numpy.unpackb(conn.recv())
            except websockets.exceptions.ConnectionClosed:
                return
            assert obs["observation/image"].shape == (480, 640, 3)  # decoded, as a policy would see it
            conn.send(packer.pack(actions))

    with websockets.sync.server.serve(handler, "127.0.0.1", 0, compression=None, max_size=None) as server:
        with open(port_file, "w") as handle:
            handle.write(str(server.socket.getsockname()[1]))
        server.serve_forever()


def client(port: int, n: int, warmup: int, hz: float = 0.0) -> None:
    import numpy as np
    from openpi_client.websocket_client_policy import WebsocketClientPolicy

    rng = np.random.default_rng(0)
    obs = {
        "observation/image": rng.integers(0, 255, (480, 640, 3), np.uint8),
        "observation/wrist_image": rng.integers(0, 255, (480, 640, 3), np.uint8),
        "observation/state": np.zeros(16, np.float32),
        "prompt": "pick up the cube",
    }
    policy = WebsocketClientPolicy("127.0.0.1", port)
    samples, tick = [], time.perf_counter()
    for i in range(n + warmup):
        if hz > 0:
            tick += 1.0 / hz
            time.sleep(max(0.0, tick - time.perf_counter()))
        start = time.perf_counter()
        result = policy.infer(obs)
        if i >= warmup:
            samples.append((time.perf_counter() - start) * 1000)
    assert result["actions"].shape == (50, 7)
    print(json.dumps(samples))


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2])
    else:
        client(
            int(sys.argv[2]),
            int(sys.argv[3]),
            int(sys.argv[4]),
            float(sys.argv[5]) if len(sys.argv) > 5 else 0.0,
        )
