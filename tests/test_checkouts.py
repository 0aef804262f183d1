"""Checkpoints come back as they went in (issue 27): a pytorch_model*.bin folder checks out as .bin, byte for
byte (``--format`` chooses), ``checkout --force`` swaps a new folder in whole, and a commit names what a folder
holds that it does not version. Tiny models built from configs: nothing is downloaded."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from mdiff.atomic import UnsafeOutputError  # noqa: E402
from mdiff.checkpoints import load_checkpoint, open_checkpoint  # noqa: E402
from mdiff.cli.main import main  # noqa: E402
from mdiff.errors import CheckpointError, InvalidFileError, RepositoryError  # noqa: E402
from mdiff.format import layout as layout_format  # noqa: E402
from mdiff.repo import Repository  # noqa: E402
from mdiff.repo.states import StateView  # noqa: E402

DATE = "2026-05-01T00:00:00Z"
TOKENS = torch.tensor([[1, 5, 9, 3, 7, 2, 11, 4]])


def llama(dtype=torch.float32, seed: int = 0):
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    return transformers.LlamaForCausalLM(config).to(dtype)


def train_step(model, lr: float = 1e-4) -> None:
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    model(TOKENS, labels=TOKENS).loss.backward()
    optimizer.step()


def save_bin(model, folder: Path, shard: str = "20KB") -> Path:
    """What ``save_pretrained(folder, safe_serialization=False)`` wrote in transformers 4 (transformers 5 writes
    safetensors whatever it is asked): the state dict less tied duplicates, split by huggingface_hub as
    transformers split it, each shard a plain dict torch.save'd by path, and the index as transformers dumped it."""
    from huggingface_hub import split_torch_state_dict_into_shards

    state, seen = {}, set()
    for name, tensor in model.state_dict().items():
        if tensor.untyped_storage().data_ptr() not in seen:  # tied (lm_head = embed_tokens): saved once
            seen.add(tensor.untyped_storage().data_ptr())
            state[name] = tensor
    split = split_torch_state_dict_into_shards(state, filename_pattern="pytorch_model{suffix}.bin", max_shard_size=shard)
    folder.mkdir(parents=True, exist_ok=True)
    for file, names in split.filename_to_tensors.items():
        torch.save({name: state[name].contiguous() for name in names}, folder / file)
    if split.is_sharded:
        index = {"metadata": split.metadata, "weight_map": split.tensor_to_filename}
        (folder / "pytorch_model.bin.index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    model.config.save_pretrained(folder)
    (folder / "README.md").write_text("# tiny\n", encoding="utf-8")
    return folder


def files_of(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def same_bytes(a: Path, b: Path) -> None:
    assert files_of(a) == files_of(b)
    for name in files_of(a):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def bits(tensor) -> np.ndarray:
    tensor = tensor.contiguous()
    return tensor.view(torch.int16).numpy() if tensor.dtype == torch.bfloat16 else tensor.numpy()


def same_tensors(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    for name in a:
        assert a[name].dtype == b[name].dtype and a[name].shape == b[name].shape, name
        assert np.array_equal(bits(a[name]), bits(b[name])), name


def bin_tensors(folder: Path) -> dict:
    """Every tensor of the folder's .bin files, in file order then each file's own order (torch.load, weights_only)."""
    out = {}
    for file in sorted(folder.glob("*.bin")):
        out.update(torch.load(file, weights_only=True))
    return out


def logits(folder: Path):
    with torch.no_grad():
        return transformers.AutoModelForCausalLM.from_pretrained(folder)(TOKENS).logits


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def committed(tmp_path: Path, folder: Path) -> Repository:
    repo = Repository.init(tmp_path / "repo")
    repo.commit(folder, "base", date=DATE)
    return repo


# ---------------------------------------------------------------- .bin folders come back as .bin


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("shard", ["20KB", "50GB"], ids=["sharded", "single"])
def test_a_bin_folder_checks_out_as_bin_byte_for_byte(tmp_path, shard, dtype):
    model = llama(dtype)
    v1 = save_bin(model, tmp_path / "v1", shard)
    assert ("pytorch_model.bin.index.json" in files_of(v1)) == (shard == "20KB")
    repo = committed(tmp_path, v1)
    train_step(model)
    v2 = save_bin(model, tmp_path / "v2", shard)
    assert repo.make_commit(v2, "step", date=DATE).changed > 0
    for rev, folder in (("HEAD~1", v1), ("HEAD", v2)):
        out = tmp_path / f"out-{rev.replace('~', '_')}"
        written = repo.checkout(rev, out)
        assert sorted(written) == files_of(folder)
        same_bytes(folder, out)  # the .bin files (same torch), the index, config.json, README.md
        same_tensors(bin_tensors(out), bin_tensors(folder))  # torch.load(weights_only=True): bit for bit, in order
        assert torch.equal(logits(out), logits(folder))


def test_format_safetensors_and_back_to_bin(tmp_path, capsys):
    v1 = save_bin(llama(), tmp_path / "v1")
    repo = committed(tmp_path, v1)
    code, out, err = run(capsys, "checkout", "HEAD", "-o", tmp_path / "st", "--format", "safetensors", "-C", repo.root)
    assert code == 0, err
    renamed = [name.replace("pytorch_model", "model").replace(".bin", ".safetensors") for name in files_of(v1)]
    assert files_of(tmp_path / "st") == sorted(renamed) and "model.safetensors.index.json" in renamed
    index = json.loads((tmp_path / "st" / "model.safetensors.index.json").read_text())
    original = json.loads((v1 / "pytorch_model.bin.index.json").read_text())
    assert index["metadata"] == original["metadata"]
    assert index["weight_map"] == {k: v.replace("pytorch_model", "model").replace(".bin", ".safetensors")
                                   for k, v in original["weight_map"].items()}
    reloaded = load_checkpoint(tmp_path / "st")
    expected = bin_tensors(v1)
    assert set(reloaded) == set(expected)
    for name, tensor in expected.items():
        assert np.array_equal(reloaded[name].view(np.uint8), tensor.numpy().view(np.uint8)), name
    assert torch.equal(logits(tmp_path / "st"), logits(v1))
    # the safetensors folder committed: its layout is now safetensors; --format bin gives .bin files again
    repo.commit(tmp_path / "st", "as safetensors", date=DATE, allow_empty=True)
    assert run(capsys, "checkout", "HEAD", "-o", tmp_path / "st-again", "-C", repo.root)[0] == 0
    same_bytes(tmp_path / "st", tmp_path / "st-again")
    assert run(capsys, "checkout", "HEAD", "-o", tmp_path / "bin", "--format", "bin", "-C", repo.root)[0] == 0
    assert files_of(tmp_path / "bin") == files_of(v1)
    assert json.loads((tmp_path / "bin" / "pytorch_model.bin.index.json").read_text()) == original
    assert set(bin_tensors(tmp_path / "bin")) == set(expected)
    for name, tensor in bin_tensors(tmp_path / "bin").items():
        assert torch.equal(tensor, expected[name]), name


def test_a_state_without_a_layout_checks_out_as_bin_when_asked(tmp_path):
    model = llama()
    repo = Repository.init(tmp_path / "repo")
    repo.commit(model.state_dict(), "a state dict", date=DATE)  # no layout
    repo.checkout("HEAD", tmp_path / "default")
    assert "model.safetensors" in files_of(tmp_path / "default")
    repo.checkout("HEAD", tmp_path / "bin", weights_format="bin")
    assert files_of(tmp_path / "bin") == ["pytorch_model.bin"]
    loaded = torch.load(tmp_path / "bin" / "pytorch_model.bin", weights_only=True)
    assert list(loaded) == sorted(model.state_dict())
    same_tensors(loaded, {k: model.state_dict()[k] for k in sorted(model.state_dict())})
    repo.checkout("HEAD", tmp_path / "shards", weights_format="bin", max_shard_size=30_000)
    index = json.loads((tmp_path / "shards" / "pytorch_model.bin.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 2 and shards[0] == f"pytorch_model-00001-of-{len(shards):05d}.bin"
    assert files_of(tmp_path / "shards") == sorted(shards + ["pytorch_model.bin.index.json"])


def test_a_single_file_keeps_the_order_of_a_one_file_bin_layout(tmp_path, capsys):
    v1 = save_bin(llama(), tmp_path / "v1", "50GB")
    repo = committed(tmp_path, v1)
    repo.checkout("HEAD", tmp_path / "one.bin")
    assert (tmp_path / "one.bin").read_bytes() != b""
    assert list(torch.load(tmp_path / "one.bin", weights_only=True)) == list(bin_tensors(v1))
    code, _, err = run(capsys, "checkout", "HEAD", "-o", tmp_path / "one.safetensors", "--format", "bin", "-C", repo.root)
    assert code == 2 and "--format bin" in err and not (tmp_path / "one.safetensors").exists()


def test_a_bin_checkout_without_torch_is_md700_and_suggests_safetensors(tmp_path, monkeypatch):
    repo = committed(tmp_path, save_bin(llama(), tmp_path / "v1"))
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    with pytest.raises(CheckpointError) as caught:
        repo.checkout("HEAD", tmp_path / "out")
    assert caught.value.code == "MD700" and "--format safetensors" in caught.value.message
    assert not (tmp_path / "out").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]
    written = repo.checkout("HEAD", tmp_path / "st", weights_format="safetensors")  # reading needs no torch
    assert "model.safetensors.index.json" in written


def test_the_layout_of_a_bin_folder(tmp_path):
    v1 = save_bin(llama(), tmp_path / "v1")
    with open_checkpoint(v1) as reader:
        layout = reader.layout
    assert layout is not None and layout.format == "torch" and layout.index_path == "pytorch_model.bin.index.json"
    for shard in layout.shards:
        assert shard.metadata is None
        assert list(shard.tensors) == list(torch.load(v1 / shard.path, weights_only=True))  # the file's own order
    assert layout_format.parse(layout.encode()) == layout
    assert json.loads(layout.encode())["format"] == "torch"


@pytest.mark.parametrize("doc, words", [
    ({"format": "torch", "files": [{"path": "model.safetensors", "tensors": ["a"]}]}, "does not end in .bin"),
    ({"format": "torch", "files": [{"path": "pytorch_model.bin", "tensors": ["a"], "metadata": {}}]}, "metadata"),
    ({"format": "torch", "files": [], "index": {"path": "model.safetensors.index.json", "metadata": {}}},
     "does not end in .bin.index.json"),
    ({"format": "safetensors", "files": [{"path": "pytorch_model.bin", "tensors": ["a"]}]}, "does not end in .safetensors"),
    ({"format": "pytorch", "files": []}, "schemas/layout.schema.json"),
], ids=["torch-safetensors-file", "torch-metadata", "torch-index", "safetensors-bin-file", "unknown-format"])
def test_layout_rules_per_format(doc, words):
    with pytest.raises(InvalidFileError) as caught:
        layout_format.parse(json.dumps(doc).encode())
    assert caught.value.code == "MD307" and words in caught.value.message
    ok = {"format": "torch", "files": [{"path": "pytorch_model-00001-of-00001.bin", "tensors": ["b", "a"]}],
          "index": {"path": "pytorch_model.bin.index.json", "metadata": {"total_size": 8}}}
    assert layout_format.parse(json.dumps(ok).encode()).to_json() == ok


# ---------------------------------------------------------------- checkout --force


def test_force_replaces_a_folder_that_is_not_empty(tmp_path, capsys):
    v1 = save_bin(llama(), tmp_path / "v1")
    repo = committed(tmp_path, v1)
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    (out / "stale.bin").write_bytes(b"old")
    (out / "sub" / "x.txt").write_text("old")
    code, _, err = run(capsys, "checkout", "HEAD", "-o", out, "-C", repo.root)
    assert code != 0 and "MD706" in err and "not empty" in err  # refused without --force, untouched
    assert files_of(out) == ["stale.bin", "sub/x.txt"]
    code, _, err = run(capsys, "checkout", "HEAD", "-o", out, "--force", "-C", repo.root)
    assert code == 0, err
    same_bytes(v1, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "repo", "v1"]  # nothing staged or set aside is left


def test_force_replaces_a_file(tmp_path):
    v1 = save_bin(llama(), tmp_path / "v1")
    repo = committed(tmp_path, v1)
    (tmp_path / "out").write_text("a file where the folder goes")
    with pytest.raises(FileExistsError):
        repo.checkout("HEAD", tmp_path / "out")
    repo.checkout("HEAD", tmp_path / "out", force=True)
    same_bytes(v1, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "repo", "v1"]


def test_force_into_nothing_or_an_empty_folder(tmp_path):
    v1 = save_bin(llama(), tmp_path / "v1")
    repo = committed(tmp_path, v1)
    repo.checkout("HEAD", tmp_path / "new", force=True)
    (tmp_path / "empty").mkdir()
    repo.checkout("HEAD", tmp_path / "empty", force=True)
    same_bytes(v1, tmp_path / "new")
    same_bytes(v1, tmp_path / "empty")


def _old_folder(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    return out


def _left_as_it_was(tmp_path: Path, out: Path) -> None:
    assert files_of(out) == ["keep.txt"] and (out / "keep.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "repo", "v1"]


def test_force_leaves_the_old_folder_when_verification_fails_mid_write(tmp_path, monkeypatch):
    repo = committed(tmp_path, save_bin(llama(), tmp_path / "v1"))
    out = _old_folder(tmp_path)
    reads = []
    real_read = StateView.read

    def failing_read(self, name):
        reads.append(name)
        if len(reads) == 5:  # some shards written already
            raise RepositoryError("MD802", f"{name!r} in the state at HEAD fails its check")
        return real_read(self, name)

    monkeypatch.setattr(StateView, "read", failing_read)
    with pytest.raises(RepositoryError) as caught:
        repo.checkout("HEAD", out, force=True)
    assert caught.value.code == "MD802" and len(reads) >= 5
    _left_as_it_was(tmp_path, out)


def test_force_leaves_the_old_folder_when_a_damaged_commit_is_refused(tmp_path):
    repo = committed(tmp_path, save_bin(llama(), tmp_path / "v1"))
    head = repo.head()[1]
    path = repo.commit_path(head)
    os.chmod(path, 0o644)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    out = _old_folder(tmp_path)
    with pytest.raises(RepositoryError) as caught:
        repo.checkout("HEAD", out, force=True)
    assert caught.value.code in ("MD800", "MD802")
    _left_as_it_was(tmp_path, out)


@pytest.mark.parametrize("exchange", [True, False], ids=["exchange", "two-renames"])
def test_force_leaves_the_old_folder_when_the_swap_fails(tmp_path, monkeypatch, exchange):
    import mdiff.checkpoints.folder as folder

    repo = committed(tmp_path, save_bin(llama(), tmp_path / "v1"))
    out = _old_folder(tmp_path)
    real_rename = os.rename

    def failing_exchange(a, b):
        raise PermissionError(13, "refused by the test", str(b))

    def failing_rename(src, dst):
        if os.path.abspath(dst) == str(out) and ".out.old." not in str(src):  # the new one in, the old one aside
            raise PermissionError(13, "refused by the test", str(dst))
        return real_rename(src, dst)

    if exchange:
        monkeypatch.setattr(folder, "exchange", failing_exchange)
    else:
        monkeypatch.setattr(folder, "exchange", lambda a, b: False)
        monkeypatch.setattr(folder.os, "rename", failing_rename)
    with pytest.raises(PermissionError):
        repo.checkout("HEAD", out, force=True)
    _left_as_it_was(tmp_path, out)


def test_force_without_an_atomic_exchange_still_replaces(tmp_path, monkeypatch):
    import mdiff.checkpoints.folder as folder

    v1 = save_bin(llama(), tmp_path / "v1")
    repo = committed(tmp_path, v1)
    out = _old_folder(tmp_path)
    monkeypatch.setattr(folder, "exchange", lambda a, b: False)
    repo.checkout("HEAD", out, force=True)
    same_bytes(v1, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "repo", "v1"]


def test_force_refuses_links_special_files_and_the_repository(tmp_path, monkeypatch):
    repo = committed(tmp_path, save_bin(llama(), tmp_path / "v1"))
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "keep.txt").write_text("mine")
    os.symlink(tmp_path / "target", tmp_path / "link")
    with pytest.raises(UnsafeOutputError):
        repo.checkout("HEAD", tmp_path / "link", force=True)
    assert os.path.islink(tmp_path / "link") and files_of(tmp_path / "target") == ["keep.txt"]
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "fifo")
        with pytest.raises(UnsafeOutputError):
            repo.checkout("HEAD", tmp_path / "fifo", force=True)
    with pytest.raises(UnsafeOutputError):
        repo.checkout("HEAD", repo.root, force=True)  # it holds .mdiff/
    assert repo.head()[1] is not None
    monkeypatch.chdir(tmp_path / "target")
    with pytest.raises(UnsafeOutputError):
        repo.checkout("HEAD", tmp_path / "target", force=True)  # the folder this process runs in
    assert files_of(tmp_path / "target") == ["keep.txt"]


# ---------------------------------------------------------------- what a commit does not version


def test_a_commit_names_what_it_does_not_version(tmp_path, capsys):
    v1 = save_bin(llama(), tmp_path / "v1")
    (v1 / ".gitattributes").write_text("*.bin filter=lfs diff=lfs merge=lfs -text\n")
    (v1 / ".git" / "objects").mkdir(parents=True)
    (v1 / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (v1 / "tokenizer").mkdir()
    (v1 / "tokenizer" / ".DS_Store").write_bytes(b"\0")
    (v1 / "tokenizer" / "vocab.txt").write_text("a\nb\n")
    (v1 / "optimizer.pt").write_bytes(b"training state")
    (v1 / "notes.tmp").write_text("scratch")
    repo = Repository.init(tmp_path / "repo")
    summary = repo.make_commit(v1, "base", date=DATE, exclude=["*.tmp"])
    assert summary.not_versioned == (".git/", ".gitattributes", "notes.tmp", "optimizer.pt", "tokenizer/.DS_Store")
    assert set(summary.files) == {"README.md", "config.json", "tokenizer/vocab.txt"}
    assert summary.not_versioned_line() == ("not versioned: .git/, .gitattributes, notes.tmp, optimizer.pt, "
                                            "tokenizer/.DS_Store")
    (v1 / "README.md").write_text("# changed\n")
    code, out, err = run(capsys, "commit", v1, "-m", "readme", "--date", DATE, "-C", repo.root)
    assert code == 0, err
    assert out.splitlines()[-1] == " not versioned: .git/, .gitattributes, optimizer.pt, tokenizer/.DS_Store"
    (v1 / "README.md").write_text("# changed again\n")
    code, out, err = run(capsys, "commit", v1, "-m", "readme", "--date", DATE, "--json", "-C", repo.root)
    assert json.loads(out)["not_versioned"] == [".git/", ".gitattributes", "optimizer.pt", "tokenizer/.DS_Store"]
    clean = save_bin(llama(), tmp_path / "clean")
    summary = Repository.init(tmp_path / "repo2").make_commit(clean, "base", date=DATE)
    assert summary.not_versioned == () and summary.not_versioned_line() is None
