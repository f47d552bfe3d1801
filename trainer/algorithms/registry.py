"""Algorithm names -> classes. Each class has ``config_class``, ``iterate``, ``state_dict``."""

from __future__ import annotations


def algorithm_class(name: str) -> type:
    from trainer.algorithms.bc import BC
    from trainer.algorithms.ppo import PPO

    classes: dict[str, type] = {"ppo": PPO, "bc": BC}
    try:
        from trainer.algorithms.grpo import GRPO

        classes["grpo"] = GRPO
    except ImportError:
        pass
    try:
        from trainer.algorithms.rlpd import RLPD
        from trainer.algorithms.sac import SAC

        classes.update(sac=SAC, rlpd=RLPD)
    except ImportError:
        pass
    if name not in classes:
        raise KeyError(f"unknown algorithm {name!r}; known: {sorted(classes)}")
    return classes[name]
