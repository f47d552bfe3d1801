"""Against LeRobot itself: its dataset library (in a side venv, ``scripts/lerobot_venv.sh``) loads what
we record, edits it with its own tools (delete, split, aggregate), we append to the results and to a
dataset LeRobot recorded (AV1, quantile stats), and both sides read everything back identically."""

import json
import subprocess
from pathlib import Path

import pytest

from tests.protos.recorded_dataset import recorded

ROOT = Path(__file__).resolve().parents[2]
SIDE_PYTHON = ROOT / ".venv-lerobot" / "bin" / "python"
QUANTILE_STATS = ["count", "max", "mean", "min", "q01", "q10", "q50", "q90", "q99", "std"]


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    if not SIDE_PYTHON.exists():
        pytest.skip("no LeRobot side venv: bash scripts/lerobot_venv.sh (CI builds it)")
    work = tmp_path_factory.mktemp("roundtrip")
    recorded(work / "recorded", lengths=(5, 7, 6, 4))
    result = subprocess.run(
        [str(SIDE_PYTHON), str(ROOT / "tests" / "lerobot_roundtrip" / "roundtrip.py"), str(work / "recorded"),
         str(work / "edited")], capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


@pytest.mark.slow
@pytest.mark.parametrize(
    "stage",
    [
        "recorded",
        "deleted",
        "aggregated",
        "appended_to_deleted",
        "appended_to_aggregated",
        "appended_to_lerobot_made",
    ],
)
def test_lerobot_and_our_reader_see_the_same_episodes_frames_and_pixels(report, stage):
    seen = report[stage]
    assert seen["lengths"] == seen["ours_lengths"] and seen["frames"] == sum(seen["lengths"])
    assert seen["worst_action_diff"] == 0.0
    assert seen["worst_pixel_diff"] <= 3.0  # each decoder's own rounding of the same stream
    assert seen["action_keys"] == ["action"]  # one action output for LeRobot's policies
    assert seen["stats_keys"] == QUANTILE_STATS and seen["image_stats_keys"] == QUANTILE_STATS
    assert seen["robot_type"] == "franka" and seen["fps"] == 10


@pytest.mark.slow
def test_lerobots_edits_are_what_was_asked(report):
    assert report["recorded"]["lengths"] == [5, 7, 6, 4]
    assert report["deleted"]["lengths"] == [5, 6, 4]  # episode 1 deleted
    assert report["split"] == {"a": 2, "b": 1}
    assert report["aggregated"]["lengths"] == [5, 6, 4]


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["appended_to_deleted", "appended_to_aggregated"])
def test_appending_after_lerobots_edits_overwrites_nothing(report, stage):
    appended = report[stage]
    assert appended["index"] == 3 and appended["lengths"] == [5, 6, 4, 6]
    assert appended["files_changed"] == []  # every earlier data and video file kept byte for byte
    assert appended["last_actions"] == pytest.approx([-1.0, -0.6, -0.2, 0.2, 0.6, 1.0], abs=1e-6)


@pytest.mark.slow
def test_appending_to_a_dataset_lerobot_recorded_keeps_its_codec_and_quantile_stats(report):
    appended = report["appended_to_lerobot_made"]
    assert appended["lengths"] == [8, 8, 6]
    assert appended["info_codec"] == "av1" and appended["appended_file_codec"] in ("av1", "libdav1d")
    assert appended["stats_keys_before"] == appended["stats_keys_after"] == QUANTILE_STATS
    assert appended["image_stats_keys_after"] == QUANTILE_STATS
