"""The sections of docs/benchmarks.md that a bench other than run.py writes: their markers, and
each read back from the old report, so that run.py, which rewrites the file, keeps them."""

from __future__ import annotations

from pathlib import Path

SCALE = ("<!-- tools/bench/scale.py: begin -->", "<!-- tools/bench/scale.py: end -->")
CODEC_TARGETS = ("<!-- tools/bench/codec_targets.py: begin -->", "<!-- tools/bench/codec_targets.py: end -->")


def kept_section(path: Path, markers: tuple[str, str]) -> str:
    """The section of ``path`` between ``markers``, markers included, or "" where it has none."""
    begin, end = markers
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    if begin not in text or end not in text:
        return ""
    return begin + text.split(begin, 1)[1].split(end, 1)[0] + end + "\n"
