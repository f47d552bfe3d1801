"""MkDocs hook: the benchmarks' plots (benchmarks/results/*.png) are served as results/img/*.png, so the
results pages show the committed figures without a second copy of them in docs/."""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


def on_files(files, config):
    for png in sorted(RESULTS.glob("*.png")):
        files.append(File.generated(config, f"results/img/{png.name}", abs_src_path=str(png)))
    return files
