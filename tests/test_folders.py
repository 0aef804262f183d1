"""Models where they live (SPEC.md §10.1–§10.2, §5.5–§5.6): Hugging Face model folders — sharded
safetensors with their index, pytorch_model*.bin, the config and tokenizer files beside them — committed,
checked out and loaded back with transformers' from_pretrained, bit for bit; folders that lie or
attack are refused with their codes. Tiny models built from configs: nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import mdiff  # noqa: E402
from mdiff.checkpoints import load_checkpoint, open_checkpoint  # noqa: E402
from mdiff.cli.main import main  # noqa: E402
from mdiff.errors import CheckpointError, RepositoryError  # noqa: E402
from mdiff.repo import Repository  # noqa: E402

DATE = "2026-05-01T00:00:00Z"
TOKENS = torch.tensor([[1, 5, 9, 3, 7, 2, 11, 4]])


def llama(dtype=torch.float32, seed: int = 0):
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    return transformers.LlamaForCausalLM(config).to(dtype)


def bert(dtype=torch.float32, seed: int = 0):
    torch.manual_seed(seed)
    config = transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=32)
    return transformers.BertForMaskedLM(config).to(dtype)  # its decoder is tied to the word embeddings


def train_step(model, lr: float = 1e-4) -> None:
    """One AdamW step: the relative change of a real fine-tune (1e-5 … 1e-3), every value moved."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    model(TOKENS, labels=TOKENS).loss.backward()
    optimizer.step()


def save(model, folder: Path, shard: str = "20KB") -> Path:
    model.save_pretrained(folder, max_shard_size=shard)
    (folder / "README.md").write_text("# tiny\n", encoding="utf-8")
    (folder / "tokenizer").mkdir(exist_ok=True)
    (folder / "tokenizer" / "vocab.txt").write_text("".join(f"t{i}\n" for i in range(64)), encoding="utf-8")
    return folder


def logits(folder: Path, kind):
    model = kind.from_pretrained(folder)
    with torch.no_grad():
        return model(TOKENS).logits


def same_bytes(a: Path, b: Path) -> None:
    files_a = sorted(p.relative_to(a).as_posix() for p in a.rglob("*") if p.is_file())
    files_b = sorted(p.relative_to(b).as_posix() for p in b.rglob("*") if p.is_file())
    assert files_a == files_b
    for name in files_a:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------- round trips


@pytest.mark.parametrize("make, kind", [(llama, transformers.AutoModelForCausalLM),
                                        (bert, transformers.AutoModelForMaskedLM)], ids=["llama", "bert"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_sharded_folders_commit_and_check_out_bit_for_bit(tmp_path, make, kind, dtype):
    model = make(dtype)
    v1 = save(model, tmp_path / "v1")
    assert len(list(v1.glob("model-*.safetensors"))) > 1  # really sharded
    repo = Repository.init(tmp_path / "repo")
    root = repo.make_commit(v1, "base", date=DATE)
    assert root.added == len(load_checkpoint(v1)) and root.changed == root.deleted == 0
    assert root.files == {"README.md": "added", "config.json": "added", "tokenizer/vocab.txt": "added",
                          **({"generation_config.json": "added"} if (v1 / "generation_config.json").exists() else {})}
    train_step(model)
    (v2 := tmp_path / "v2").mkdir()
    save(model, v2)
    (v2 / "README.md").write_text("# tiny, fine-tuned\n", encoding="utf-8")
    step = repo.make_commit(v2, "fine-tune", date=DATE)
    assert step.files == {"README.md": "modified"} and step.added == step.deleted == 0 and step.changed > 0
    for rev, folder in (("HEAD~1", v1), ("HEAD", v2)):
        out = tmp_path / f"out-{rev.replace('~', '_')}"
        repo.checkout(rev, out)
        same_bytes(folder, out)  # shards, index, config, tokenizer: the folder as it was committed
        assert torch.equal(logits(folder, kind), logits(out, kind))


def test_a_fine_tune_is_stored_smaller_than_its_checkpoint(tmp_path):
    model = llama()
    repo = Repository.init(tmp_path / "repo")
    repo.commit(save(model, tmp_path / "v1"), "base", date=DATE)
    train_step(model, lr=1e-5)
    summary = repo.make_commit(save(model, tmp_path / "v2"), "step", date=DATE)
    assert summary.weights_bytes == sum(t.nbytes for t in load_checkpoint(tmp_path / "v1").values())
    assert summary.stored_bytes < summary.weights_bytes  # XOR of a small change deflates
    assert summary.line().startswith(f"{summary.changed} changed, 0 added, 0 deleted; ")


def test_bin_folders_are_read_as_torch_state_dicts(tmp_path):
    """pytorch_model-0000k-of-0000n.bin + index, as transformers 4 wrote them (torch.load weights_only)."""
    model = llama()
    state = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}  # tied: saved once
    folder = tmp_path / "bin"
    folder.mkdir()
    names = sorted(state)
    halves = {"pytorch_model-00001-of-00002.bin": names[:10], "pytorch_model-00002-of-00002.bin": names[10:]}
    for file, keys in halves.items():
        torch.save({k: state[k] for k in keys}, folder / file)
    index = {"metadata": {"total_size": 0}, "weight_map": {k: f for f, keys in halves.items() for k in keys}}
    (folder / "pytorch_model.bin.index.json").write_text(json.dumps(index), encoding="utf-8")
    model.config.save_pretrained(folder)
    repo = Repository.init(tmp_path / "repo")
    repo.commit(folder, "from .bin", date=DATE)
    out = tmp_path / "out"
    written = repo.checkout("HEAD", out)
    assert sorted(written) == sorted(os.listdir(folder))  # written as .bin again, the same names (tests/test_checkouts.py)
    written_index = json.loads((out / "pytorch_model.bin.index.json").read_text())
    assert written_index["weight_map"] == index["weight_map"]  # total_size set to the tensors' bytes (§10.2)
    assert written_index["metadata"] == {"total_size": sum(v.numel() * v.element_size() for v in state.values())}
    with open_checkpoint(out) as checked_out:
        for name in names:
            assert torch.equal(torch.from_numpy(checked_out[name]), state[name])
    assert torch.equal(logits(folder, transformers.AutoModelForCausalLM), logits(out, transformers.AutoModelForCausalLM))


def test_a_single_bin_file_is_a_torch_state_dict(tmp_path):
    state = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3)}
    torch.save(state, tmp_path / "weights.bin")
    assert np.array_equal(load_checkpoint(tmp_path / "weights.bin")["w"], state["w"].numpy())


def test_a_committed_safetensors_file_checks_out_to_its_own_bytes(tmp_path):
    """The file's __metadata__ and tensor order (safetensors sorts by dtype, then name) are kept (§10.2)."""
    from safetensors.torch import save_file

    state = {"b": torch.zeros(3), "a": torch.ones(2, dtype=torch.bfloat16), "c": torch.arange(5), "aa": torch.ones(1)}
    save_file(state, tmp_path / "m.safetensors", metadata={"format": "pt"})
    repo = Repository.init(tmp_path / "repo")
    repo.commit(tmp_path / "m.safetensors", "base", date=DATE)
    repo.checkout("HEAD", tmp_path / "out.safetensors")
    assert (tmp_path / "out.safetensors").read_bytes() == (tmp_path / "m.safetensors").read_bytes()
    repo.checkout("HEAD", tmp_path / "folder")  # as a folder it is model.safetensors, the same bytes
    assert (tmp_path / "folder" / "model.safetensors").read_bytes() == (tmp_path / "m.safetensors").read_bytes()
    # several metadata members: the safetensors library orders them by a random hash; the layout keeps them sorted
    save_file(state, tmp_path / "n.safetensors", metadata={"format": "pt", "step": "3", "run": "a"})
    repo.commit(tmp_path / "n.safetensors", "metadata", date=DATE)
    repo.checkout("HEAD", tmp_path / "n-out.safetensors")
    with open_checkpoint(tmp_path / "n-out.safetensors") as out:
        assert out.metadata == {"format": "pt", "run": "a", "step": "3"} and out.order == ["c", "aa", "b", "a"]


def test_a_state_dict_commit_keeps_the_folder_s_files_and_layout(tmp_path):
    """The training loop commits tensors; the config, tokenizer and shard layout stay as committed."""
    model = llama()
    v1 = save(model, tmp_path / "v1")
    repo = Repository.init(tmp_path / "repo")
    repo.commit(v1, "base", date=DATE)
    train_step(model)
    summary = repo.make_commit(model.state_dict(), "step 1", date=DATE, allow_deletions=False)
    assert summary.added == 1  # lm_head.weight: tied, save_pretrained wrote it once, state_dict() has both
    out = tmp_path / "out"
    written = repo.checkout("HEAD", out)
    assert {"config.json", "README.md", "tokenizer/vocab.txt"} <= set(written)
    assert not any(name.startswith("model-") for name in written)  # a new tensor: re-sharded, one file
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out)
    for name, value in model.state_dict().items():
        assert torch.equal(reloaded.state_dict()[name], value), name


def test_apply_and_diff_take_folders(tmp_path, capsys):
    model = llama()
    v1 = save(model, tmp_path / "v1")
    train_step(model)
    v2 = save(model, tmp_path / "v2")
    (v2 / "tokenizer" / "vocab.txt").unlink()
    (v2 / "added_tokens.json").write_text("{}", encoding="utf-8")
    code, out, err = run(capsys, "diff", v1, v2, "-o", tmp_path / "d.mdiff", "-q")
    assert code == 0, err
    with mdiff.open(tmp_path / "d.mdiff") as d:
        assert d.version == "1.3"  # files (1.1), updates that name their base (1.2), version-2 dense/sparse (1.3)
        assert {p: u.type for p, u in d.files.items()} == {"added_tokens.json": "replace", "tokenizer/vocab.txt": "delete"}
        assert d.layout is None  # the shard layout did not change
    assert mdiff.validate(tmp_path / "d.mdiff") == []
    code, out, err = run(capsys, "apply", v1, tmp_path / "d.mdiff", "-o", tmp_path / "v2-again", "-q")
    assert code == 0, err
    same_bytes(v2, tmp_path / "v2-again")


def test_folder_output_is_refused_when_it_exists_and_is_not_empty(tmp_path):
    model = llama()
    v1 = save(model, tmp_path / "v1")
    repo = Repository.init(tmp_path / "repo")
    repo.commit(v1, "base", date=DATE)
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "keep.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(FileExistsError):
        repo.checkout("HEAD", taken)
    assert sorted(os.listdir(taken)) == ["keep.txt"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".taken")]  # no staging folder left
    (empty := tmp_path / "empty").mkdir()
    repo.checkout("HEAD", empty)
    same_bytes(v1, empty)


def test_checkout_to_a_folder_with_another_shard_size(tmp_path, capsys):
    model = llama()
    state = {k: v for k, v in model.state_dict().items()}
    repo = Repository.init(tmp_path / "repo")
    repo.commit(state, "from a state dict", date=DATE)  # no layout: shards as save_pretrained names them
    code, out, err = run(capsys, "checkout", "HEAD", "-o", tmp_path / "out", "--max-shard-size", "30kB", "-C", repo.root)
    assert code == 0, err
    index = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert shards[0] == f"model-00001-of-{len(shards):05d}.safetensors" and len(shards) > 2
    assert index["metadata"] == {"total_size": sum(v.numel() * 4 for v in state.values())}
    reloaded = load_checkpoint(tmp_path / "out")
    assert set(reloaded) == set(state)


# ---------------------------------------------------------------- PyTorch without files


def test_torch_state_dicts_round_trip_for_load_state_dict(tmp_path):
    model = llama(torch.bfloat16)
    repo = Repository.init(tmp_path / "repo")
    repo.commit(model.state_dict(), "bf16 base", date=DATE)
    train_step(model)
    repo.commit(model.state_dict(), "step", date=DATE)
    state = repo.checkout("HEAD", framework="pt")
    fresh = llama(torch.bfloat16, seed=1)
    fresh.load_state_dict(state, strict=True)
    for name, value in model.state_dict().items():
        assert state[name].dtype == value.dtype and torch.equal(state[name], value), name


def test_diff_and_apply_take_torch_tensors(tmp_path):
    base = {"w": torch.arange(12, dtype=torch.float32).reshape(3, 4), "b": torch.ones(4, dtype=torch.bfloat16),
            "steps": torch.tensor(3)}
    new = {"w": base["w"].t().contiguous().t(),  # the same values, another memory layout
           "b": torch.full((4,), 1.5, dtype=torch.bfloat16), "steps": torch.tensor(4),
           "view": base["w"][:, 1]}  # non-contiguous, sharing storage
    updates = mdiff.diff(base, new)
    assert {name: u.type for name, u in updates.items()} == {"b": "dense", "steps": "dense", "view": "replace"}
    mdiff.write(tmp_path / "d.mdiff", updates, mdiff.Commit("t"))
    with mdiff.open(tmp_path / "d.mdiff") as d:
        result = mdiff.apply(base, d)
        as_numpy = mdiff.apply({k: v.numpy() if v.dtype != torch.bfloat16 else v for k, v in base.items()}, d,
                               framework="np")
    assert set(result) == set(new) and all(isinstance(v, torch.Tensor) for v in result.values())
    for name, value in new.items():
        assert torch.equal(result[name], value), name
    assert isinstance(as_numpy["w"], np.ndarray) and np.array_equal(as_numpy["w"], new["w"].numpy())


# ---------------------------------------------------------------- guards


def test_one_shard_by_mistake_is_refused_and_an_unchanged_folder_commits_nothing(tmp_path, capsys):
    model = llama()
    v1 = save(model, tmp_path / "v1")
    repo = Repository.init(tmp_path / "repo")
    repo.commit(v1, "base", date=DATE)
    shard = sorted(v1.glob("model-*.safetensors"))[1]
    with pytest.raises(RepositoryError) as caught:
        repo.commit(shard, "one shard", date=DATE)
    assert caught.value.code == "MD806" and "--allow-deletions" in caught.value.message
    assert repo.commit(v1, "again", date=DATE) is None
    code, out, _ = run(capsys, "commit", v1, "-m", "again", "-C", repo.root)
    assert code == 1 and "nothing to commit" in out
    code, out, _ = run(capsys, "commit", v1, "-m", "again", "-C", repo.root, "--allow-empty", "--json")
    assert code == 0 and json.loads(out)["changed"] == 0
    kept = repo.commit(shard, "one shard", date=DATE, allow_deletions=True)
    assert len(repo.state(kept)) == len(load_checkpoint(shard))


def test_status_lists_files_too(tmp_path, capsys):
    model = llama()
    v1 = save(model, tmp_path / "v1")
    repo = Repository.init(tmp_path / "repo")
    repo.commit(v1, "base", date=DATE)
    (v1 / "README.md").write_text("changed\n", encoding="utf-8")
    (v1 / "notes.txt").write_text("new\n", encoding="utf-8")
    changes = repo.status(v1)
    assert changes.tensors == {} and changes.files == {"README.md": "modified", "notes.txt": "added"}
    code, out, _ = run(capsys, "status", v1, "-C", repo.root, "--exclude", "notes.txt")
    assert code == 0 and "modified  file README.md" in out and "notes.txt" not in out


def test_merges_combine_files_and_report_conflicting_ones(tmp_path):
    model = llama()
    repo = Repository.init(tmp_path / "repo")
    base = save(model, tmp_path / "base")
    repo.commit(base, "base", date=DATE)
    repo.set_branch("other", repo.head()[1])
    ours = tmp_path / "ours"
    shutil.copytree(base, ours)
    (ours / "README.md").write_text("ours\n", encoding="utf-8")
    repo.commit(ours, "ours", date=DATE)
    repo.set_head("other")
    theirs = tmp_path / "theirs"
    shutil.copytree(base, theirs)
    (theirs / "notes.txt").write_text("theirs\n", encoding="utf-8")
    repo.commit(theirs, "theirs", date=DATE)
    repo.set_head("main")
    result = repo.merge("other", date=DATE)
    assert result.conflicts == []
    with repo.open_state(result.commit) as state:
        assert state.files["README.md"] == b"ours\n" and state.files["notes.txt"] == b"theirs\n"
    (theirs / "README.md").write_text("theirs too\n", encoding="utf-8")
    repo.set_head("other")
    repo.commit(theirs, "theirs again", date=DATE)
    repo.set_head("main")
    result = repo.merge("other", date=DATE)
    assert result.commit is None and [c.name for c in result.conflicts] == ["file README.md"]


# ---------------------------------------------------------------- folders that lie or attack


def _folder(tmp_path) -> Path:
    return save(llama(), tmp_path / "m")


def _code(path, **options) -> CheckpointError:
    with pytest.raises(CheckpointError) as caught:
        with open_checkpoint(path, **options) as reader:
            list(reader.files.items()) if reader.files is not None else None
    return caught.value


def _edit_index(folder: Path, change) -> None:
    index_path = folder / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    change(index)
    index_path.write_text(json.dumps(index), encoding="utf-8")


def test_an_index_that_disagrees_with_its_shards_is_md704(tmp_path):
    folder = _folder(tmp_path)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    first, shard = next(iter(index["weight_map"].items()))
    cases = {
        "missing shard": lambda f: (f / shard).unlink(),
        "tensor in another shard": lambda f: _edit_index(f, lambda i: i["weight_map"].update(
            {first: sorted(set(i["weight_map"].values()) - {shard})[0]})),
        "tensor the map does not name": lambda f: _edit_index(f, lambda i: i["weight_map"].pop(first)),
        "a name no shard holds": lambda f: _edit_index(f, lambda i: i["weight_map"].update({"ghost.weight": shard})),
        "not JSON": lambda f: (f / "model.safetensors.index.json").write_text("{", encoding="utf-8"),
        "no weight_map": lambda f: (f / "model.safetensors.index.json").write_text("{}", encoding="utf-8"),
        "index and single file": lambda f: shutil.copy(f / shard, f / "model.safetensors"),
        "no weights at all": lambda f: [p.unlink() for p in f.glob("model*")],
    }
    for label, damage in cases.items():
        broken = tmp_path / label.replace(" ", "_")
        shutil.copytree(folder, broken)
        damage(broken)
        error = _code(broken)
        assert error.code == "MD704", (label, error)


def test_a_tensor_in_two_shards_is_md704(tmp_path):
    from safetensors.numpy import save_file

    folder = tmp_path / "twice"
    folder.mkdir()
    save_file({"a": np.zeros(2, np.float32)}, folder / "model-00001-of-00002.safetensors")
    save_file({"a": np.zeros(2, np.float32)}, folder / "model-00002-of-00002.safetensors")
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    assert _code(folder).code == "MD704"


def test_entries_a_folder_must_not_bring_are_md705(tmp_path):
    folder = _folder(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("password\n", encoding="utf-8")
    cases = {
        "a link out of the folder": lambda f: (f / "notes.txt").symlink_to(secret),
        "a link to a folder": lambda f: (f / "outside").symlink_to(tmp_path),
        "a FIFO": lambda f: os.mkfifo(f / "pipe"),
        "a file over the limit": lambda f: (f / "optimizer_state.bin.big").write_bytes(b"\0" * 2048),
        "an unsafe name": lambda f: (f / "con.json").write_text("{}", encoding="utf-8"),
        "an index naming a shard outside": lambda f: _edit_index(f, lambda i: i["weight_map"].update(
            {next(iter(i["weight_map"])): "../secret.safetensors"})),
    }
    for label, damage in cases.items():
        broken = tmp_path / label.replace(" ", "_")
        shutil.copytree(folder, broken)
        damage(broken)
        error = _code(broken, max_file_bytes=1024)
        assert error.code == "MD705", (label, error)
        assert "password" not in error.message


def test_hidden_entries_training_state_and_excluded_files_are_left_out(tmp_path):
    folder = _folder(tmp_path)
    (folder / ".git").mkdir()
    (folder / ".git" / "config").write_text("[core]\n", encoding="utf-8")
    (folder / ".gitattributes").write_text("*.safetensors filter=lfs\n", encoding="utf-8")
    for name in ("optimizer.pt", "scheduler.pt", "rng_state.pth", "training_args.bin", "logs.txt"):
        (folder / name).write_bytes(b"x")
    with open_checkpoint(folder, exclude=["logs.*"]) as reader:
        assert sorted(reader.files) == ["README.md", "config.json", "generation_config.json", "tokenizer/vocab.txt"]


def test_a_hugging_face_cache_snapshot_with_links_into_blobs_is_read(tmp_path):
    folder = _folder(tmp_path)
    cache = tmp_path / "models--tiny" / "snapshots" / "abc123"
    blobs = tmp_path / "models--tiny" / "blobs"
    cache.mkdir(parents=True)
    blobs.mkdir()
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            relative = path.relative_to(folder)
            blob = blobs / relative.as_posix().replace("/", "_")
            shutil.copy(path, blob)
            (cache / relative).parent.mkdir(parents=True, exist_ok=True)
            (cache / relative).symlink_to(os.path.relpath(blob, (cache / relative).parent))
    with open_checkpoint(cache) as linked, open_checkpoint(folder) as plain:
        assert dict(linked.files) == dict(plain.files)
        assert all(np.array_equal(linked[n], plain[n]) for n in plain.keys())


def test_an_apply_writes_no_path_outside_its_folder(tmp_path):
    """A diff whose files could escape is refused before a byte is written (MD304)."""
    import tests.invalid_files as inv
    from mdiff.checkpoints import save_checkpoint

    save_checkpoint(tmp_path / "base.safetensors", inv.base_state())
    inv.build_MD304_file_path_dotdot(tmp_path / "evil.mdiff")
    (tmp_path / "sub").mkdir()
    with pytest.raises(mdiff.InvalidFileError) as caught:
        mdiff.apply_files(tmp_path / "base.safetensors", tmp_path / "evil.mdiff", tmp_path / "sub" / "out")
    assert caught.value.code == "MD304"
    assert not (tmp_path / "sub" / "escape.txt").exists() and os.listdir(tmp_path / "sub") == []


def test_output_folders_respect_the_umask(tmp_path):
    model = llama()
    repo = Repository.init(tmp_path / "repo")
    repo.commit(save(model, tmp_path / "v1"), "base", date=DATE)
    old = os.umask(0o027)
    try:
        repo.checkout("HEAD", tmp_path / "out")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "out").stat().st_mode) == 0o750
    assert stat.S_IMODE((tmp_path / "out" / "config.json").stat().st_mode) == 0o640
