"""learning_curve.png: one line per source of a mixed run, drawn from metrics.jsonl alone."""

from __future__ import annotations

import json

import numpy as np
from PIL import Image

from trainer.learning_curve import CURVE_FILE, curve_lines, main, plot_learning_curve, read_metrics


def write_metrics(run_dir, rows, cut_last_line=False):
    text = "".join(json.dumps(row) + "\n" for row in rows)
    (run_dir / "metrics.jsonl").write_text(text[:-20] if cut_last_line else text)


def mixed_rows(n=6):
    rows = []
    for i in range(1, n + 1):
        row = {
            "iteration": i,
            "env_steps": 100 * i,
            "wall_s": 2.0 * i,
            "success_rate": i / n,
            "return_mean": i,
        }
        row.update(
            {
                "source/sim:rlinf/FrankaPickLift-v0/success_rate": i / n,
                "source/robot:twin-0/success_rate": 0.5,
            }
        )
        row.update(
            {"source/sim:rlinf/FrankaPickLift-v0/return_mean": i, "source/robot:twin-0/return_mean": 1.0}
        )
        if i % 2 == 0:
            row["eval/success_rate"], row["eval/return_mean"] = i / n, float(i)
        rows.append(row)
    return rows


def test_each_source_of_a_mixed_run_gets_its_own_line(tmp_path):
    rows = mixed_rows()
    lines = curve_lines(rows, "success_rate", "eval/success_rate", "/success_rate")
    assert lines == {
        "training envs": "success_rate",
        "greedy eval": "eval/success_rate",
        "robot:twin-0": "source/robot:twin-0/success_rate",
        "sim:rlinf/FrankaPickLift-v0": "source/sim:rlinf/FrankaPickLift-v0/success_rate",
    }
    # A sim-only run without evaluations: only the training envs' line.
    plain = [{k: v for k, v in row.items() if not k.startswith(("source/", "eval/"))} for row in rows]
    assert curve_lines(plain, "return_mean", "eval/return_mean", "/return_mean") == {
        "training envs": "return_mean"
    }


def test_the_picture_is_drawn_from_the_metrics_even_when_the_last_line_was_cut_short(tmp_path, capsys):
    write_metrics(tmp_path, mixed_rows(), cut_last_line=True)
    assert len(read_metrics(tmp_path / "metrics.jsonl")) == 5
    assert main([str(tmp_path)]) == 0 and capsys.readouterr().out.strip() == str(tmp_path / CURVE_FILE)
    picture = np.asarray(Image.open(tmp_path / CURVE_FILE).convert("RGB"))
    assert picture.shape[0] > 400 and picture.shape[1] > 800
    assert (picture.std(axis=(0, 1)) > 10).all()  # drawn, not a blank canvas
    assert plot_learning_curve(tmp_path / "nothing") is None
    assert main([str(tmp_path / "nothing")]) == 2 and "no metrics.jsonl rows" in capsys.readouterr().err
