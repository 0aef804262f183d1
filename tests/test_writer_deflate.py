"""The writer's deflate encoder (SPEC.md §11): zlib-ng where installed, whose bytes must be stdlib zlib's.

A corpus of the chunks a writer meets (tools/deflate_agreement.py's generator: shuffled deltas of fp32,
bf16 and fp16 at many magnitudes, sparse, zeros, runs, noise, repeats; every size around deflate's own
boundaries, up to the 1 MiB chunk) deflated by both, compared byte for byte. The tool runs it for longer."""

from __future__ import annotations

import importlib.util
import zlib
from pathlib import Path

import pytest

from mdiff.format import writer

TOOL = Path(__file__).resolve().parents[1] / "tools" / "deflate_agreement.py"


def _tool():
    spec = importlib.util.spec_from_file_location("deflate_agreement", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _stdlib(data: bytes) -> bytes:
    compressor = zlib.compressobj(1, zlib.DEFLATED, 15, 8, zlib.Z_RLE)
    return compressor.compress(data) + compressor.flush()


def test_the_writer_deflates_with_zlib_ng_where_installed():
    zlib_ng = pytest.importorskip("zlib_ng.zlib_ng")
    assert writer.encoder() is zlib_ng


@pytest.mark.parametrize("seed", [0, 1])
def test_zlib_ng_and_the_writer_give_stdlib_zlib_s_bytes_on_every_chunk_of_the_corpus(seed):
    """Seed 0: every kind at every boundary size (0 to 1 MiB) and random ones; seed 1: random kinds and sizes."""
    pytest.importorskip("zlib_ng")
    tool = _tool()
    chunks = list(tool.corpus(seed, 300))
    assert len(chunks) == 300
    if seed == 0:
        assert {kind.split()[0] for kind, _ in chunks} == set(tool.KINDS)
        assert {len(data) for _, data in chunks} >= {0, 1, 258, 259, 16384, 32768, 65536, (1 << 20) - 1, 1 << 20}
    differ = [kind for kind, data in chunks if tool.zlib_ng_deflate(data) != _stdlib(data)]
    assert differ == []
    written = [kind for kind, data in chunks[::7] if writer.deflate_rle(data) != _stdlib(data)]
    assert written == []


def test_the_agreement_tool_reports_agreement_and_its_exit_status(capsys):
    pytest.importorskip("zlib_ng")
    assert _tool().main(["--chunks", "12", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "seed 3: 12 chunks" in out and out.rstrip().endswith(", 0 differ")


def test_the_probes_a_faster_encoder_must_pass_are_deflated_the_same_by_the_writer():
    for data in writer._probes():
        assert writer.deflate_rle(data) == _stdlib(data)
        assert zlib.decompress(writer.deflate_rle(data)) == data
