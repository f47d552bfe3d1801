"""LeRobot's async-inference link, as its robot client and policy server use it: gRPC with LeRobot's own
generated ``AsyncInference`` service (``lerobot.transport``), the observation pickled and streamed in
2 MB parts by ``send_bytes_in_chunks``, read back by ``receive_bytes_in_chunks`` and unpickled; the
action chunk a pickled list of timed actions holding torch tensors, fetched by ``GetActions``. One
round trip is ``SendObservations`` then ``GetActions``, as the client does per observation it sends.
Run inside the peer's own venv by ``benchmarks/link_compare.py``; prints one JSON line of round-trip
samples in ms.

    python lerobot_peer.py serve PORT_FILE
    python lerobot_peer.py client PORT N WARMUP [HZ]    # HZ > 0: one request per tick, as a robot sends
"""

from __future__ import annotations

import json
import pickle
import sys
import time
from dataclasses import dataclass


@dataclass
class TimedObservation:
    """The fields of LeRobot's ``async_inference.helpers.TimedObservation`` (its module pulls in every
    policy, so the peer defines the same record here: the pickle carries the same arrays)."""

    timestamp: float
    timestep: int
    observation: dict
    must_go: bool = False


@dataclass
class TimedAction:
    """The fields of LeRobot's ``TimedAction``: one step of the chunk, as a torch tensor."""

    timestamp: float
    timestep: int
    action: object


def serve(port_file: str) -> None:
    import queue
    import threading
    from concurrent import futures

    import grpc
    import torch
    from lerobot.transport import services_pb2, services_pb2_grpc
    from lerobot.transport.utils import receive_bytes_in_chunks

    chunk = torch.zeros((50, 7), dtype=torch.float32)

    class Server(services_pb2_grpc.AsyncInferenceServicer):
        def __init__(self) -> None:
            self.observations: queue.Queue = queue.Queue(maxsize=1)
            self.shutdown = threading.Event()

        def Ready(self, request, context):  # noqa: N802
            return services_pb2.Empty()

        def SendObservations(self, request_iterator, context):  # noqa: N802
            received = receive_bytes_in_chunks(request_iterator, None, self.shutdown)
            observation = pickle.loads(received)
            assert observation.observation["front"].shape == (
                480,
                640,
                3,
            )  # decoded, as a policy would see it
            self.observations.put(observation)
            return services_pb2.Empty()

        def GetActions(self, request, context):  # noqa: N802
            observation = self.observations.get(timeout=10)
            actions = [
                TimedAction(observation.timestamp, observation.timestep + i, chunk[i])
                for i in range(len(chunk))
            ]
            return services_pb2.Actions(data=pickle.dumps(actions))

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    services_pb2_grpc.add_AsyncInferenceServicer_to_server(Server(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    with open(port_file, "w") as handle:
        handle.write(str(port))
    server.wait_for_termination()


def client(port: int, n: int, warmup: int, hz: float = 0.0) -> None:
    import grpc
    import numpy as np
    from lerobot.transport import services_pb2, services_pb2_grpc
    from lerobot.transport.utils import grpc_channel_options, send_bytes_in_chunks

    rng = np.random.default_rng(0)
    observation = {
        "front": rng.integers(0, 255, (480, 640, 3), np.uint8),
        "wrist": rng.integers(0, 255, (480, 640, 3), np.uint8),
        **{f"joint_{i}.pos": 0.0 for i in range(16)},  # a LeRobot robot's state: one float per motor
        "task": "pick up the cube",
    }
    stub = services_pb2_grpc.AsyncInferenceStub(
        grpc.insecure_channel(f"127.0.0.1:{port}", grpc_channel_options())
    )
    stub.Ready(services_pb2.Empty())
    samples, tick = [], time.perf_counter()
    for i in range(n + warmup):
        if hz > 0:
            tick += 1.0 / hz
            time.sleep(max(0.0, tick - time.perf_counter()))
        start = time.perf_counter()
        timed = TimedObservation(time.time(), i, observation, must_go=True)
        stub.SendObservations(send_bytes_in_chunks(pickle.dumps(timed), services_pb2.Observation))
        actions = pickle.loads(stub.GetActions(services_pb2.Empty()).data)
        if i >= warmup:
            samples.append((time.perf_counter() - start) * 1000)
    assert len(actions) == 50 and tuple(actions[0].action.shape) == (7,)
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
