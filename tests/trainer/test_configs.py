import pytest

from trainer.configs import ConfigError, load_config
from trainer.configs.loader import algorithm_config, preset_names


def test_default_preset_is_ppo_on_pick_lift_with_state():
    config = load_config()
    assert config.algorithm == "ppo"
    assert config.env.id == "rlinf/FrankaPickLift-v0"
    assert config.policy.kind == "mlp"
    assert list(config.env.kwargs["cameras"]) == []


def test_overrides_are_typed_and_applied():
    config = load_config(
        "ppo_reach", ["run.total_env_steps=1234", "policy.hidden_sizes=[32,32]", "algo.learning_rate=0.001"]
    )
    assert config.run.total_env_steps == 1234
    assert config.policy.hidden_sizes == [32, 32]
    assert algorithm_config(config).learning_rate == 0.001


@pytest.mark.parametrize(
    ("name", "overrides", "message"),
    [
        (None, ["run.totl_env_steps=5"], r"run\.totl_env_steps"),
        (None, ["run.total_env_steps=lots"], r"run\.total_env_steps"),
        (None, ["algo.learning_rat=0.1"], r"algo\.learning_rat"),
        (None, ["algorithm=dqn"], "unknown algorithm 'dqn'"),
        (None, ["policy.kind=transformer"], "policy.kind must be"),
        (
            "vla_grpo_pick_color",
            ["policy.vla.flow_sde_steps=two"],
            r"policy\.vla\.flow_sde_steps must be one of",
        ),
        (None, ["run.seed"], "must look like key=value"),
        ("no_such_preset", [], "unknown config 'no_such_preset'; presets:"),
        ("missing.yaml", [], "does not exist"),
    ],
)
def test_bad_configs_fail_with_the_key_named(name, overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(name, overrides)


def test_every_preset_loads():
    names = preset_names()
    assert "ppo_pick_lift" in names
    for name in names:
        load_config(name)


def test_the_algorithm_registry_names_unknown_algorithms_and_never_hides_an_import_error(monkeypatch):
    from trainer.algorithms import registry

    with pytest.raises(
        KeyError,
        match=r"unknown algorithm 'dreamer'; known: \['bc', 'grpo', 'ppo', 'reward_classifier', 'rlpd', 'sac', 'world_model'\]",
    ):
        registry.algorithm_class("dreamer")
    assert registry.algorithm_class("sac").__name__ == "SAC"
    monkeypatch.setitem(registry.ALGORITHMS, "sac", ("trainer.algorithms.sac_with_a_typo", "SAC"))
    with pytest.raises(ModuleNotFoundError, match="sac_with_a_typo"):
        registry.algorithm_class("sac")
