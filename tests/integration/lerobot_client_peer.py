"""LeRobot's own async-inference ``RobotClient`` (lerobot 0.6.1, in the LeRobot side venv) on a robot
whose observation is fixed, against a server.

    python lerobot_client_peer.py ADDRESS OBSERVATION.npz OUT.npz CHUNKS ACTION_DIM

OBSERVATION.npz holds ``state`` (the motor values), optionally ``image`` (the ``front`` camera,
uint8 [h, w, 3]) and ``task`` (utf-8 bytes). The robot is a LeRobot ``Robot`` registered the way a
third-party robot is (a ``RobotConfig`` subclass), so ``RobotClient`` builds and drives it as any
other; it always returns that observation and records each action it is sent. The client runs its
two threads (actions in, control loop) until CHUNKS chunks have arrived; OUT.npz gets each chunk's
actions and timesteps as ``RobotClient`` received them and the actions the robot carried out. A
failed handshake (the server refused the setup) prints ``ERROR: ...`` and exits 3. Nothing of rlinf
is imported here: this is the robot's side.
"""

import sys
import threading
import time
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
from lerobot.async_inference.configs import RobotClientConfig
from lerobot.async_inference.robot_client import RobotClient
from lerobot.robots import Robot, RobotConfig

FIXED: dict = {}  # the robot's observation, set from the file before the client starts
CARRIED_OUT: list[list[float]] = []


@RobotConfig.register_subclass("rlinf_fixed_observation")
@dataclass
class FixedObservationRobotConfig(RobotConfig):
    motors: list[str] = field(default_factory=list)
    action_dim: int = 0


class FixedObservationRobot(Robot):
    """A robot that always sees the same thing: enough to compare a server's answers with ours."""

    config_class = FixedObservationRobotConfig
    name = "rlinf_fixed_observation"

    def __init__(self, config: FixedObservationRobotConfig):
        super().__init__(config)
        self.config, self.connected = config, False

    @cached_property
    def observation_features(self) -> dict:
        cameras = {"front": FIXED["front"].shape} if "front" in FIXED else {}
        return {**dict.fromkeys(self.config.motors, float), **cameras}

    @cached_property
    def action_features(self) -> dict:
        return {f"a{i}": float for i in range(self.config.action_dim)}

    @property
    def is_connected(self) -> bool:
        return self.connected

    def connect(self, calibrate: bool = True) -> None:
        self.connected = True

    @property
    def is_calibrated(self) -> bool:
        return True

    def calibrate(self) -> None:
        pass

    def configure(self) -> None:
        pass

    def get_observation(self) -> dict:
        return dict(FIXED)

    def send_action(self, action: dict) -> dict:
        CARRIED_OUT.append([action[k] for k in self.action_features])
        return action

    def disconnect(self) -> None:
        self.connected = False


def main() -> int:
    address, observation_path, out_path, chunks, action_dim = sys.argv[1:6]
    stored = np.load(observation_path)
    motors = [f"joint_{i}.pos" for i in range(len(stored["state"]))]
    FIXED.update({m: float(v) for m, v in zip(motors, stored["state"], strict=True)})
    if "image" in stored.files:
        FIXED["front"] = stored["image"]
    task = bytes(stored["task"]).decode() if "task" in stored.files else ""
    config = RobotClientConfig(
        policy_type="pi0", pretrained_name_or_path="lerobot/pi0_base", robot=FixedObservationRobotConfig(
            motors=motors, action_dim=int(action_dim)), actions_per_chunk=3, server_address=address,
        task=task, aggregate_fn_name="latest_only", chunk_size_threshold=0.5, fps=30,
    )  # fmt: skip
    client = RobotClient(config)
    received: list = []
    aggregate = client._aggregate_action_queues

    def recording(actions, *args, **kwargs):  # what the client received, before its own aggregation
        received.append(actions)
        return aggregate(actions, *args, **kwargs)

    client._aggregate_action_queues = recording
    if not client.start():
        print("ERROR: the server refused the policy setup", flush=True)
        return 3
    threads = [
        threading.Thread(target=client.receive_actions, daemon=True),
        threading.Thread(target=client.control_loop, args=(task,), daemon=True),
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    while len(received) < int(chunks) and time.monotonic() < deadline:
        time.sleep(0.01)
    client.stop()
    chunk_actions = [np.stack([a.get_action().numpy() for a in chunk]) for chunk in received[: int(chunks)]]
    steps = [[a.get_timestep() for a in chunk] for chunk in received[: int(chunks)]]
    np.savez(out_path, chunks=np.stack(chunk_actions), timesteps=np.array(steps),
             carried_out=np.array(CARRIED_OUT, np.float32), dtype=str(received[0][0].get_action().dtype))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
