"""``rlinf-trainer view``: a recorded episode logged to rerun, written to an .rrd and read back."""

import numpy as np
import rerun.chunk as rerun_chunk

from protos.episode_frames import POLICY_ACTION
from tests.protos.recorded_dataset import SPEC, recorded
from trainer.cli import main


def read_rrd(path) -> dict[str, list]:
    """Entity path -> its chunks' record batches."""
    out: dict[str, list] = {}
    for chunk in rerun_chunk.RrdReader(str(path)).stream().to_chunks():
        out.setdefault(str(chunk.entity_path), []).append(chunk.to_record_batch())
    return out


def column(batches, name) -> list:
    values = []
    for batch in batches:
        if name in batch.schema.names:
            values += batch.column(name).to_pylist()
    return values


def test_view_logs_an_episodes_cameras_actions_rewards_flags_and_labels(tmp_path, capsys):
    episodes = recorded(tmp_path / "ds")
    rrd = tmp_path / "episode1.rrd"
    assert main(["view", str(tmp_path / "ds"), "--episode", "1", "--save", str(rrd)]) == 0
    assert "episode 1: 7 frames saved to" in capsys.readouterr().out
    logged = read_rrd(rrd)
    assert {"/cameras/front", "/action", "/observation.state", f"/{POLICY_ACTION}", "/next.reward",
            "/intervention", "/episode"} <= set(logged)  # fmt: skip
    assert len(column(logged["/cameras/front"], "Image:buffer")) == 7
    assert sorted(column(logged["/action"], "frame_index")) == list(range(7))
    actions = np.array(column(logged["/action"], "Scalars:scalars"))
    np.testing.assert_allclose(actions, episodes[1].vectors["action"], atol=1e-6)
    assert [v[0] for v in column(logged["/intervention"], "Scalars:scalars")] == [0, 1, 0, 1, 0, 1, 0]
    assert [v[0] for v in column(logged["/next.reward"], "Scalars:scalars")] == list(range(7))
    names = column(logged["/action"], "SeriesLines:names")
    assert [n for n in names if n] == [list(SPEC.action.names)]
    label = column(logged["/episode"], "TextDocument:text")[0][0]
    assert "ep-1" in label and "**success**: True" in label and "labelled success" in label


def test_view_names_a_missing_episode(tmp_path, capsys):
    recorded(tmp_path / "ds", lengths=(3,))
    assert main(["view", str(tmp_path / "ds"), "--episode", "4", "--save", str(tmp_path / "x.rrd")]) == 2
    assert "has no episode 4; it has 0..0" in capsys.readouterr().err


def test_view_without_a_display_says_to_save_instead(tmp_path, capsys, monkeypatch):
    recorded(tmp_path / "ds", lengths=(3,))
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr("sys.platform", "linux")
    assert main(["view", str(tmp_path / "ds")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: no display here") and "--save FILE.rrd" in err and "\n" not in err
