"""A real multi-node Ray cluster (three raylets on this host, ``ray.cluster_utils.Cluster``): the
multi-node config shape (env stages spread over two "sim boxes", rollout + actor on the "GPU box",
pinned by custom node resources) joins it through ``cluster.ray_address`` and trains; the run's
``ray_workers.json`` says which node each worker ran on."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow
MIB = 1024 * 1024


def test_the_multinode_layout_runs_on_a_real_three_node_ray_cluster(tmp_path):
    from ray.cluster_utils import Cluster

    store = {"object_store_memory": 100 * MIB}
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"gpu_box": 1}, **store}
    )
    try:
        sims = [cluster.add_node(num_cpus=1, resources={f"sim_box_{i}": 1}, **store) for i in (1, 2)]
        cluster.wait_for_nodes()
        config = tmp_path / "multinode.yaml"
        config.write_text(
            textwrap.dedent(
                f"""
                algorithm: ppo
                env:
                  id: rlinf/FrankaReach-v0
                  num_envs: 4
                  backend: inline
                  kwargs: {{cameras: [], action_rotation: false, max_episode_steps: 10}}
                policy: {{hidden_sizes: [32]}}
                run: {{total_env_steps: 80, eval_every: 0, final_eval_episodes: 0, checkpoint_every: 1, output_dir: "{tmp_path / "run"}"}}
                algo: {{update_epochs: 1, num_minibatches: 2}}
                cluster:
                  placement: hybrid
                  ray_address: "{cluster.address}"
                  pipeline_stages: 2
                  bundles:
                    - {{CPU: 1, sim_box_1: 1}}
                    - {{CPU: 1, sim_box_2: 1}}
                    - {{CPU: 1, gpu_box: 1}}
                  roles: {{env: [0, 1], rollout: 2, actor: 2}}
                """
            )
        )
        # In its own process: joins cluster.ray_address, trains, checkpoints, says where its workers ran.
        done = subprocess.run(
            [sys.executable, "-m", "trainer.cli", "train", "--config", str(config)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        nodes = json.loads((tmp_path / "run" / "ray_workers.json").read_text())
        rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
        assert rows[-1]["env_steps"] == 80
        head = cluster.head_node.node_id
        assert nodes["env"] == [sims[0].node_id, sims[1].node_id]  # stage k on the k-th sim box
        assert nodes["rollout"] == [head] and nodes["actor"] == [head]
    finally:
        cluster.shutdown()
