"""``data.features``: the run's dataset schema from an env spec file or a dataset, checked at start."""

from __future__ import annotations

import json

import pytest

from protos.env_spec import CameraSpec, EnvSpec, StateField, ee_delta_action_space
from protos.episode_frames import features_of
from trainer.configs.loader import ConfigError
from trainer.server.config import DataSection, run_features


def spec(size: int) -> EnvSpec:
    return EnvSpec("s", (CameraSpec("front", size, size, 10.0),), (StateField("tcp_pos", 3),),
                   ee_delta_action_space(), 10.0, "", 5)  # fmt: skip


def test_data_features_come_from_a_spec_file_and_must_match_an_existing_dataset(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec(64).to_dict()))
    data = DataSection(record_dir=str(tmp_path / "dataset"), features=str(path))
    assert run_features(data) == features_of(spec(64))
    assert run_features(DataSection(record_dir=str(tmp_path / "dataset"))) is None
    (tmp_path / "dataset" / "meta").mkdir(parents=True)
    info = {"fps": 10.0, "features": {"observation.images.front": {"shape": [32, 32, 3]},
                                      "observation.state": {"shape": [3]}, "action": {"shape": [7]}}}  # fmt: skip
    (tmp_path / "dataset" / "meta" / "info.json").write_text(json.dumps(info))
    with pytest.raises(ConfigError, match="does not match the dataset already at"):
        run_features(data)
    with pytest.raises(ConfigError, match="neither an env spec JSON file nor a LeRobot dataset"):
        run_features(DataSection(record_dir=str(tmp_path / "other"), features=str(tmp_path / "missing")))
