"""One env table: each entry says what building it needs, and the trainer asks the entry, never the id."""

import pytest

import sim_envs
from sim_envs import registry
from sim_envs.registry import TABLETOP_ENV, EnvEntry, UnknownEnvError
from trainer.configs.schema import EnvConfig
from trainer.runner import env_entry, evaluates_through_vector_env


@pytest.fixture
def scratch_id():
    """An id registered by the test, gone afterwards."""
    env_id = "test/UR5eReach-v0"
    yield env_id
    registry.ENVS.pop(env_id, None)


def test_a_new_env_id_is_one_registry_line(scratch_id):
    sim_envs.register_env(scratch_id, EnvEntry(TABLETOP_ENV, kwargs={"task": "reach", "robot": "ur5e"}))
    env = sim_envs.make(scratch_id, cameras=())
    assert env.env_spec.name == "rlinf/UR5eReach-v0" and env.env_spec.metadata["robot"] == "ur5e"
    env.close()
    venv = sim_envs.make_vector(scratch_id, 2, backend="inline", cameras=())
    assert venv.spec.name == "rlinf/UR5eReach-v0"
    venv.close()
    sim_envs.register_env(
        scratch_id, EnvEntry(TABLETOP_ENV, kwargs={"task": "reach", "robot": "ur5e"})
    )  # same
    with pytest.raises(ValueError, match="registered already"):
        sim_envs.register_env(scratch_id, EnvEntry(TABLETOP_ENV, kwargs={"task": "push"}))


def test_the_trainer_follows_what_the_entry_says(scratch_id):
    def config(env_id, **kwargs):
        return EnvConfig(id=env_id, **kwargs)

    assert not evaluates_through_vector_env(config("rlinf/FrankaPickLift-v0"))
    assert evaluates_through_vector_env(config("rlinf/IsaacLab-v0"))  # batched on its device
    assert evaluates_through_vector_env(config("rlinf/WorldModel-v0"))  # registered by policies.world_model
    assert evaluates_through_vector_env(config("rlinf/MetaWorld-v0", python="/venv/bin/python"))
    assert env_entry(config("rlinf/WorldModel-v0")).imagined
    assert not env_entry(config("rlinf/FrankaPickLift-v0")).imagined
    assert env_entry(config("rlinf/MetaWorld-v0")).venv == "metaworld"
    # A batched env of one's own is evaluated through its vector env, as IsaacLab is.
    sim_envs.register_env(scratch_id, EnvEntry(vector_env="my_pkg.envs:MyBatchedEnv"))
    assert evaluates_through_vector_env(config(scratch_id))
    with pytest.raises(
        ValueError, match=r"is batched \(one object steps every env\): build it with make_vector"
    ):
        sim_envs.make(scratch_id)


def test_an_unknown_id_lists_the_known_ones():
    with pytest.raises(
        UnknownEnvError, match=r"unknown env id 'rlinf/Nope-v0'; known: \[.*'rlinf/UR5ePickLift-v0'"
    ):
        sim_envs.make("rlinf/Nope-v0")
