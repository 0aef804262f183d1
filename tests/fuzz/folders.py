"""Fuzzing what mdiff reads besides .mdiff files: repository folders and checkpoints.

Two families of tasks run on the harness's workers (tests/fuzz/harness.py), with the same limits
(address space, time per task) and the same classification (OK, TYPED, UNTYPED, MEMORY, BADRESULT,
HANG, CRASH):

- ``repository``: a small seed repository (branches, a merge, a snapshot) is copied and mutated
  the way an attacker who prepared the folder would: FIFOs, directories and links (to
  ``/dev/zero``, out of the repository) in place of HEAD, refs, commits or snapshots; oversized or
  garbage refs; a branch named like another commit's full id; a commit that names itself as its
  parent; a snapshot holding another state; commits removed or bit-flipped. The targets are what
  a victim runs: open, branches, log of every head, ``HEAD~100000000``, fsck, and a checkout of every
  commit the seed has — compared with the seed's own states: a checkout that returns other weights
  than the commit id means, without an error, is BADRESULT (a lie).
- ``remote``: the seed repository is a folder remote whose listing of refs is changed as its owner could:
  refs that vanish and come back while a fetch lists and reads them, names that are not refs, oversized
  refs, duplicates (a tag and a branch, names that differ in case or Unicode form, hard links), links (to
  another ref, ``/dev/zero``, out of the remote, dangling, in a loop, a linked folder), FIFOs and folders,
  and a listing past the cap of refs one fetch reads (§13.8). The targets are what a victim runs against it:
  the remote's refs listed, a clone, a fetch of ``main``'s first-parent line; a clone's branches must name
  the commits the remote's unchanged refs name, and each commit fetched must hold its oracle state.
- ``checkpoint``: a seed ``.safetensors``, ``.npz`` or ``.onnx`` checkpoint is mutated (bytes flipped,
  lengths and offsets in its header or zip directory changed, members duplicated) and read
  whole through mdiff's checkpoint readers, then diffed against its seed.

The supervisor builds the seeds once (:func:`prepare`); a task names its family, seed and random
seed, and the worker rebuilds its input from them (so a failing task reproduces from its numbers).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import struct
import threading
import unicodedata
from pathlib import Path

import numpy as np

CHECKPOINT_SEEDS = ("model.safetensors", "model.npz", "model.onnx")
_HUGE_REVISION = "HEAD~100000000"


# ---------------------------------------------------------------- seeds


def _state(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"emb.weight": rng.standard_normal((8, 4)).astype(np.float32),
            "layer.bias": rng.standard_normal(4).astype(np.float32),
            "steps": np.arange(3, dtype=np.int64)}


def prepare(workdir) -> dict:
    """Seeds under ``workdir/folder-seeds``: a repository with its states' sha256 per commit
    (``oracle.json``), and one checkpoint of each format. Returns {"repository": dir, "oracle": {…},
    "checkpoints": [paths]}."""
    import mdiff
    from mdiff.checkpoints import save_checkpoint
    from mdiff.updates.base import sha256_hex

    root = Path(workdir) / "folder-seeds"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    rng = np.random.default_rng(20261203)
    project = root / "repository"
    repo = mdiff.Repository.init(project)
    author = "fuzz <fuzz@example.com>"
    date = "2026-01-01T00:00:00Z"
    state = _state(rng)
    for step in range(3):
        state["emb.weight"][step, 0] += 1
        repo.commit(dict(state), f"main {step}", author=author, date=date)
    repo.switch("feat", create=True)
    for step in range(2):
        state["layer.bias"][step] -= 1
        repo.commit(dict(state), f"feat {step}", author=author, date=date)
    repo.switch("main")
    repo.merge("feat", strategy="theirs", message="merge feat", author=author, date=date, everything=True)
    repo.snapshot("HEAD")
    oracle = {}
    for commit_id in repo.commit_ids():
        values = repo.state(commit_id)
        oracle[commit_id] = {name: sha256_hex(value) for name, value in values.items()}
    (root / "oracle.json").write_text(json.dumps(oracle, sort_keys=True), encoding="utf-8")
    checkpoints = []
    for name in CHECKPOINT_SEEDS:
        path = root / name
        if name.endswith(".onnx"):
            _save_onnx(path, state)
        else:
            save_checkpoint(path, state)
        checkpoints.append(str(path))
    return {"repository": str(project), "oracle": oracle, "checkpoints": checkpoints}


def _save_onnx(path: Path, state: dict[str, np.ndarray]) -> None:
    import onnx
    from onnx import helper, numpy_helper

    inits = [numpy_helper.from_array(value, name) for name, value in state.items()]
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4])
    graph = helper.make_graph([helper.make_node("Add", ["x", "layer.bias"], ["y"])], "g", [x], [y], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path.write_bytes(model.SerializeToString())


def make_tasks(seeds: dict, master_seed: int, count: int, start: int = 0) -> list[dict]:
    """``count`` tasks, repository and checkpoint alternating."""
    tasks = []
    for i in range(start, start + count):
        rng = random.Random(f"{master_seed}:{i}")
        if i % 2 == 0:
            tasks.append({"id": i, "family": "repository", "seed": seeds["repository"], "rng": rng.getrandbits(64)})
        else:
            tasks.append({"id": i, "family": "checkpoint", "seed": rng.choice(seeds["checkpoints"]), "rng": rng.getrandbits(64)})
    return tasks


# ---------------------------------------------------------------- repository mutations


def _repo_files(mdiff_dir: Path) -> list[Path]:
    return sorted(p for p in mdiff_dir.rglob("*") if p.is_file() and not p.is_symlink() and p.name != "lock")


def _replace_with(path: Path, kind: str, rng: random.Random, outside: Path) -> str:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        path.mkdir()
    elif kind == "dev-zero":
        os.symlink("/dev/zero", path)
    elif kind == "link-out":
        secret = outside / "secret.txt"
        secret.write_text("TOP-SECRET-CONTENT " * 8, encoding="utf-8")
        os.symlink(secret, path)
    elif kind == "dangling":
        os.symlink(outside / "missing", path)
    elif kind == "huge":
        with open(path, "wb") as f:
            f.write(b"0" * 64 + b"a" * (8 << 20))  # 8 MiB: a ref is at most 100 bytes
    elif kind == "garbage":
        path.write_bytes(bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 200))))
    return f"{kind} at {path.name}"


def _flip_bits(path: Path, rng: random.Random, flips: int) -> None:
    data = bytearray(path.read_bytes())
    for _ in range(flips):
        if data:
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(data))


def _retarget_commit(mdiff_dir: Path, commit_id: str, parents: list[str]) -> None:
    """Rewrite a commit's parents in place, keeping its (now wrong) name."""
    import h5py

    from mdiff.hdf5walk.attributes import write_string

    path = mdiff_dir / "commits" / f"{commit_id}.mdiff"
    with h5py.File(path, "r+") as f:
        commit = json.loads(bytes(f.attrs["commit"]).decode("utf-8") if isinstance(f.attrs["commit"], bytes)
                            else f.attrs["commit"])
        commit["parents"] = parents
        write_string(f, "commit", json.dumps(commit))


def _fresh_copy(seed: Path, target: Path, outside_name: str) -> tuple[Path, Path]:
    """``target`` made a fresh copy of the seed repository (links kept as links), and an empty folder beside it
    for what mutations point outside; their `.mdiff` and that folder."""
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(seed, target, symlinks=True)
    outside = target.parent / outside_name
    shutil.rmtree(outside, ignore_errors=True)
    outside.mkdir()
    return target / ".mdiff", outside


def mutate_repository(seed: Path, target: Path, rng: random.Random, oracle: dict) -> list[str]:
    """Copy the seed repository to ``target`` and change it as a hostile preparer would."""
    md, outside = _fresh_copy(seed, target, "outside")
    ids = sorted(oracle)
    chosen = [rng.choice(["special", "special", "flip", "shadow", "self-parent", "cycle", "lying-snapshot",
                          "remove-commit", "head-escape", "bad-branch-name"]) for _ in range(rng.randint(1, 3))]
    # edits that rewrite a commit with h5py first: after a bit flip or a swap for a FIFO there is no file to edit
    chosen.sort(key=lambda op: op not in ("self-parent", "cycle"))
    ops = []
    if "lying-snapshot" in chosen:  # made with the repository's own writer, before anything else is damaged
        ops.append(_lying_snapshot(target, ids, rng))
    for op in chosen:
        files = _repo_files(md)
        if op == "special" and files:
            path = rng.choice(files)
            kind = rng.choice(["fifo", "dir", "dev-zero", "link-out", "dangling", "huge", "garbage"])
            ops.append(_replace_with(path, kind, rng, outside))
        elif op == "flip":
            commits = [p for p in sorted((md / "commits").glob("*.mdiff")) if p.is_file() and not p.is_symlink()]
            if commits:
                path = rng.choice(commits)
                _flip_bits(path, rng, rng.randint(1, 8))
                ops.append(f"bits flipped in {path.name}")
        elif op == "shadow":
            victim, other = rng.sample(ids, 2)
            (md / "refs" / "heads" / victim).write_text(other + "\n", encoding="utf-8")
            ops.append(f"branch {victim[:12]}… names {other[:12]}…")
        elif op in ("self-parent", "cycle"):
            a, b = rng.sample(ids, 2)
            if (md / "commits" / f"{a}.mdiff").is_file():
                _retarget_commit(md, a, [a] if op == "self-parent" else [b])
                if op == "cycle" and (md / "commits" / f"{b}.mdiff").is_file():
                    _retarget_commit(md, b, [a])
                ops.append(f"{op}: {a[:12]}…")
        elif op == "remove-commit":
            path = md / "commits" / f"{rng.choice(ids)}.mdiff"
            if path.is_symlink() or path.is_file():
                path.unlink()
                ops.append(f"removed {path.name}")
        elif op == "head-escape":
            head = md / "HEAD"
            if head.is_dir() and not head.is_symlink():
                shutil.rmtree(head)
            else:
                head.unlink(missing_ok=True)
            head.write_text(rng.choice(["ref: refs/heads/../../../etc/passwd\n", "ref: refs/heads/x..y\n",
                                        "ref: /etc/passwd\n", "0" * 64 + "\n", "ref: refs/heads/\x00\n"]),
                            encoding="utf-8")
            ops.append("HEAD rewritten")
        elif op == "bad-branch-name":
            name = rng.choice(["x..y", "v1.lock", "a b", "-rf", ".hidden", "ünï"])
            (md / "refs" / "heads" / name).write_text(ids[0] + "\n", encoding="utf-8")
            ops.append(f"branch {name!r}")
    return ops


def _lying_snapshot(project: Path, ids: list[str], rng: random.Random) -> str:
    """A snapshot, valid as a file, filed under a commit whose state it does not hold: another
    commit's state, or the commit's own with one value changed."""
    from mdiff.repo import Repository
    from mdiff.repo.snapshots import write_snapshot

    repo = Repository(project)
    claimed = rng.choice(ids)
    if rng.random() < 0.5:
        source = rng.choice([c for c in ids if c != claimed])
        state = repo.state(source)
        how = f"the state of {source[:12]}…"
    else:
        state = {name: value.copy() for name, value in repo.state(claimed).items()}
        name = rng.choice(sorted(state))
        state[name].reshape(-1).view(np.uint8)[0] ^= 0x40
        how = f"its own state with {name!r} changed"
    write_snapshot(repo, claimed, state)
    return f"snapshot of {claimed[:12]}… holds {how}"


# ---------------------------------------------------------------- cache mutations (SPEC.md §13.2)

CACHE_SHARE = 1 / 3


@contextlib.contextmanager
def _cache_folder(folder: Path | str):
    """``$MDIFF_CACHE_DIR`` set to ``folder`` ("off": no cache) while the block runs, then as it was."""
    from mdiff.format.walk_cache import ENV

    before = os.environ.get(ENV)
    os.environ[ENV] = str(folder)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = before


def _fill_cache(seed: Path, cache: Path, oracle: dict) -> None:
    """A fresh cache folder (the user's own, 0700) holding what an honest reading of the seed keeps: every
    commit's walk and metadata."""
    from mdiff.repo import Repository

    if cache.exists():
        for folder in [cache, *(p for p in cache.rglob("*") if p.is_dir() and not p.is_symlink())]:
            folder.chmod(0o700)  # a group-writable folder of the last task's
        shutil.rmtree(cache)
    cache.mkdir(mode=0o700)
    with _cache_folder(cache):
        repo = Repository(seed)
        for commit_id in sorted(oracle):
            repo.metadata(commit_id)
            repo.state(commit_id)


def _cache_entries(cache: Path) -> list[Path]:
    return sorted(p for p in cache.rglob("*") if p.suffix in (".json", ".walk") and p.is_file() and not p.is_symlink())


def mutate_cache(cache: Path, rng: random.Random) -> list[str]:
    """Change the cache's entries and folders as someone who can write them would: bytes flipped, an
    entry cut short, two entries' contents swapped (an entry naming the other commit, or relabelled with
    this one's id), the stored offset or text of a commit's metadata changed, a folder made group-writable."""
    ops: list[str] = []
    wanted = rng.randint(1, 3)
    for _ in range(8 * wanted):  # an op that does not apply to the entry drawn is drawn again
        if len(ops) == wanted:
            break
        entries = _cache_entries(cache)
        if not entries:
            break
        op = rng.choice(["flip", "truncate", "swap", "relabel", "offset", "text", "group-writable"])
        path = rng.choice(entries)
        kind = path.relative_to(cache).parts[0]
        data = path.read_bytes()
        if op == "flip" and data:
            _flip_bits(path, rng, rng.randint(1, 4))
        elif op == "truncate":
            path.write_bytes(data[:rng.randrange(len(data) + 1)])
        elif op in ("swap", "relabel"):
            others = [p for p in entries if p != path and p.relative_to(cache).parts[0] == kind]
            if not others:
                continue
            other = rng.choice(others)
            theirs = other.read_bytes()
            if op == "relabel":  # the other commit's walk or metadata, well-formed, under this commit's id
                theirs = theirs.replace(other.stem.encode(), path.stem.encode())
                path.write_bytes(theirs)
            else:
                path.write_bytes(theirs)
                other.write_bytes(data)
        elif op in ("offset", "text"):
            try:
                entry = json.loads(data)
            except ValueError:
                continue
            if not (isinstance(entry, dict) and "at" in entry and isinstance(entry.get("commit"), str)):
                continue
            if op == "offset":
                entry["at"] = rng.choice([0, 1, entry["at"] - 1, entry["at"] + 1, entry["at"] + 8, 2**62])
            else:
                commit = json.loads(entry["commit"])
                commit[rng.choice(["message", "author", "parents"])] = rng.choice(["a lie", [], ["0" * 64]])
                entry["commit"] = json.dumps(commit)
            path.write_text(json.dumps(entry), encoding="utf-8")
        elif op == "group-writable":
            folder = rng.choice([cache, *path.relative_to(cache).parents[:-1]])
            folder = cache / folder if folder != cache else cache
            folder.chmod(0o770)
            op += f" ({folder.relative_to(cache)})"
        ops.append(f"cache {op}: {kind} {path.stem[:12]}…")
    return ops


def _views(project: Path, oracle: dict) -> dict:
    """What `log`, `show` and `fsck` say of the repository: each commit's metadata in the history of every
    head, each commit's metadata and weights, and fsck's findings — an error as its type and code."""
    from mdiff.repo import Repository
    from mdiff.repo.history import topological
    from mdiff.updates.base import sha256_hex

    def outcome(fn):
        try:
            return ("ok", fn())
        except Exception as exc:  # noqa: BLE001 — compared, not judged: run_repository_targets classifies
            return ("error", type(exc).__name__, getattr(exc, "code", None))

    repo = Repository(project)
    views = {"branches": outcome(lambda: sorted(repo.branches().items()))}
    heads = sorted({t for _, t in views["branches"][1] if t}) if views["branches"][0] == "ok" else []
    views["log"] = outcome(lambda: [(c, repr(repo.metadata(c))) for c in topological(repo, heads)])
    for commit_id in sorted(oracle):
        views[f"show {commit_id}"] = outcome(lambda c=commit_id: repr(Repository(project).metadata(c)))
        views[f"checkout {commit_id}"] = outcome(
            lambda c=commit_id: sorted((n, sha256_hex(v)) for n, v in Repository(project).state(c).items()))
    views["fsck"] = outcome(lambda: [repr(f) for f in Repository(project).fsck()])
    return views


def _cache_changes_nothing(project: Path, oracle: dict, cache: Path) -> bool:
    """The oracle of a poisoned cache: `log`, `show`, `fsck` and checkouts say what they say with no cache."""
    with _cache_folder(cache):
        cached = _views(project, oracle)
    with _cache_folder("off"):
        plain = _views(project, oracle)
    changed = sorted(name for name in plain if cached.get(name) != plain[name])
    if changed:
        raise _Lie(f"a cache entry changed what {changed[0]} says: {str(cached.get(changed[0]))[:120]} "
                   f"instead of {str(plain[changed[0]])[:120]} ({len(changed)} views changed)")
    return True


# ---------------------------------------------------------------- checkpoint mutations


def mutate_checkpoint(seed: Path, target: Path, rng: random.Random) -> list[str]:
    """A copy of the seed checkpoint at ``target`` (same suffix), changed where its structure lies."""
    data = bytearray(seed.read_bytes())
    ops = []
    kind = seed.suffix
    for _ in range(rng.randint(1, 3)):
        choice = rng.choice(["flip", "flip", "structure", "truncate", "extend"])
        if choice == "flip" and data:
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
            ops.append(f"bit flipped at {i}")
        elif choice == "truncate" and data:
            cut = rng.randrange(len(data))
            del data[cut:]
            ops.append(f"cut at {cut}")
        elif choice == "extend":
            data += bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 64)))
            ops.append("bytes appended")
        elif choice == "structure":
            op = {".safetensors": _safetensors_header, ".npz": _zip_directory}.get(kind)
            if op is not None:
                data, what = op(bytes(data), rng)
                data = bytearray(data)
                ops.append(what)
    target.write_bytes(bytes(data))
    return ops


def _safetensors_header(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """A header edit that keeps the file parseable as JSON: offsets, shapes, dtypes, lengths."""
    if len(data) < 8:
        return data, "too short for a header"
    (n,) = struct.unpack("<Q", data[:8])
    try:
        header = json.loads(data[8:8 + n])
    except ValueError:
        return data, "header not JSON"
    names = [k for k in header if k != "__metadata__"]
    if not names:
        return data, "no tensors"
    name = rng.choice(names)
    entry = header[name]
    what = rng.choice(["offsets", "overlap", "shape", "dtype", "length", "metadata"])
    if what == "offsets":
        entry["data_offsets"] = [rng.choice([0, 1, 2**31, 2**63 - 1, -1]), rng.choice([0, 8, 2**40, 2**64])]
    elif what == "overlap":
        other = header[rng.choice(names)]
        entry["data_offsets"] = list(other["data_offsets"])
    elif what == "shape":
        entry["shape"] = rng.choice([[2**62, 2**62], [-1], [0, 2**62], [1] * 40, "x"])
    elif what == "dtype":
        entry["dtype"] = rng.choice(["F8_E4M3", "Q4", "", 7, "F32 "])
    elif what == "length":
        return struct.pack("<Q", rng.choice([0, n + 1, 2**63, len(data) + 10])) + data[8:], "header length changed"
    else:
        header["__metadata__"] = rng.choice([{"format": 7}, "x", {"a" * 100: "b" * 100000}])
    text = json.dumps(header).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data[8 + n:], f"header {what} of {name!r}"


def _zip_directory(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """Edits of an .npz's zip directory: a member's sizes, its offset (members overlapping), a duplicate."""
    end = data.rfind(b"PK\x05\x06")
    central = data.find(b"PK\x01\x02")
    if end < 0 or central < 0:
        return data, "no zip directory"
    entries = []
    i = central
    while 0 <= i < end:
        entries.append(i)
        n, m, k = struct.unpack("<HHH", data[i + 28:i + 34])
        i = data.find(b"PK\x01\x02", i + 46 + n + m + k)
    if not entries:
        return data, "empty directory"
    at = rng.choice(entries)
    out = bytearray(data)
    what = rng.choice(["compressed size", "size", "offset", "offset-overlap"])
    if what == "compressed size":
        out[at + 20:at + 24] = struct.pack("<I", rng.choice([0, 1, 2**31, 2**32 - 1]))
    elif what == "size":
        out[at + 24:at + 28] = struct.pack("<I", rng.choice([0, 2**30, 2**32 - 1]))
    else:
        other = rng.choice(entries)
        offset = struct.unpack("<I", data[other + 42:other + 46])[0] if what == "offset-overlap" else rng.randrange(len(data))
        out[at + 42:at + 46] = struct.pack("<I", offset)
    return bytes(out), f"zip directory: {what}"


# ---------------------------------------------------------------- remote listing mutations (SPEC.md §13.8)

REMOTE_CAP = 200  # the cap of refs one fetch reads, in the tests' round (the tool's: the reference's 100,000)
_VANISH_TOGGLES = 20_000  # at most this many disappearances and returns of refs while the targets run


def make_remote_tasks(seeds: dict, master_seed: int, count: int, start: int = 0, cap: int | None = REMOTE_CAP) -> list[dict]:
    """``count`` tasks of the ``remote`` family (a stream of their own: the other families' numbers stay).
    ``cap``: the cap of refs the worker's fetches read (None: the reference's own)."""
    tasks = []
    for i in range(start, start + count):
        rng = random.Random(f"{master_seed}:remote:{i}")
        tasks.append({"id": i, "family": "remote", "seed": seeds["repository"], "rng": rng.getrandbits(64), "cap": cap})
    return tasks


def _ref_files(md: Path) -> dict[str, Path]:
    """The seed's refs (branches and tags) by name, ``heads/main`` say."""
    found = {}
    for folder in ("heads", "tags"):
        base = md / "refs" / folder
        if base.is_dir():
            for path in sorted(base.rglob("*")):
                if path.is_file() and not path.is_symlink() and not path.name.startswith("."):
                    found[f"{folder}/{path.relative_to(base).as_posix()}"] = path
    return found


def _write_ref(path: Path, text: str | bytes) -> None:
    """``path`` made a regular file holding ``text``, whatever was there (a FIFO, a link, a folder: never opened)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogateescape"))


def mutate_remote_listing(seed: Path, target: Path, rng: random.Random, oracle: dict,
                          cap: int) -> tuple[list[str], set[str], list[tuple[Path, bytes]]]:
    """Copy the seed repository to ``target`` (the remote) and change what its refs folders list. Returns the
    ops, the names of the seed's refs that were changed, and the refs that vanish and return while the targets
    run, with their bytes."""
    md, outside = _fresh_copy(seed, target, "outside-remote")
    ids = sorted(oracle)
    refs = _ref_files(md)
    original = {name: path.read_bytes() for name, path in refs.items()}  # before an op makes one a FIFO
    ops: list[str] = []
    changed: set[str] = set()
    vanishing: list[tuple[Path, bytes]] = []
    kinds = ["vanish", "appear", "not-a-ref", "oversized", "duplicate", "link", "special", "past-cap"]
    weights = [3, 2, 3, 2, 3, 3, 2, 1]
    for op in rng.choices(kinds, weights, k=rng.randint(1, 3)):
        try:
            _mutate_listing(op, md, rng, ids, refs, original, outside, cap, ops, changed, vanishing)
        except OSError as exc:  # an earlier op left something in the way (a file where a folder goes, say)
            ops.append(f"{op}: not made ({exc.strerror})")
    return ops, changed, vanishing


def _mutate_listing(op: str, md: Path, rng: random.Random, ids: list[str], refs: dict[str, Path], original: dict[str, bytes],
                    outside: Path, cap: int, ops: list[str], changed: set[str], vanishing: list[tuple[Path, bytes]]) -> None:
    """One op of :func:`mutate_remote_listing`."""
    heads = md / "refs" / "heads"
    tags = md / "refs" / "tags"
    if op == "vanish" and refs:
        for name in rng.sample(sorted(refs), rng.randint(1, len(refs))):
            vanishing.append((refs[name], original[name]))
            changed.add(name)
            ops.append(f"{name} vanishes and returns")
    elif op == "appear":
        name = f"appearing-{rng.randrange(1000)}"
        vanishing.append((heads / name, (rng.choice(ids) + "\n").encode()))
        ops.append(f"heads/{name} appears and vanishes")
    elif op == "not-a-ref":
        name = rng.choice(["x..y", ".hidden", "a b", "v1.lock", "-rf", "HEAD", "a/b/c", "ünï", "@{u}", "x~1",
                           "0" * 64, ids[0], "\udcff", "trailing/", "a//b", "x" * 300])
        content = rng.choice([ids[0] + "\n", "ref: refs/heads/main\n", ids[0], ids[0].upper() + "\n", "",
                              ids[0] + "\n" + ids[1] + "\n", "\ufeff" + ids[0] + "\n"])
        folder = rng.choice([heads, tags])
        try:
            _write_ref(folder / name, content)
        except OSError as exc:  # a name the filesystem refuses
            ops.append(f"not a ref {name[:40]!r}: {exc.strerror}")
            return
        ops.append(f"not a ref: {folder.name}/{name[:40]!r} holding {content[:20]!r}")
    elif op == "oversized":
        name = rng.choice([*sorted(refs), "heads/big"])
        path = md / "refs" / name
        size = rng.choice([273, 4096, 8 << 20, 1 << 40])  # 1 TiB: sparse
        _write_ref(path, b"")
        with open(path, "r+b") as f:
            f.write((ids[0] + "\n").encode())
            f.truncate(size)
        changed.add(name)
        ops.append(f"{name} of {size} bytes")
    elif op == "duplicate":
        how = rng.choice(["tag-and-branch", "case", "unicode", "hard-link", "nested"])
        if how == "tag-and-branch":
            _write_ref(tags / "main", rng.choice(ids) + "\n")
        elif how == "case":
            _write_ref(heads / "Main", rng.choice(ids) + "\n")
            _write_ref(heads / "MAIN", rng.choice(ids) + "\n")
        elif how == "unicode":
            _write_ref(heads / unicodedata.normalize("NFC", "café"), ids[0] + "\n")
            _write_ref(heads / unicodedata.normalize("NFD", "café"), ids[-1] + "\n")
        elif how == "hard-link" and refs:
            source = refs[rng.choice(sorted(refs))]
            with contextlib.suppress(OSError):
                os.link(source, heads / "hard-linked")
        elif how == "nested":
            _write_ref(heads / "main-folder" / "main", rng.choice(ids) + "\n")
        ops.append(f"duplicate names: {how}")
    elif op == "link":
        how = rng.choice(["to-ref", "dev-zero", "out", "dangling", "loop", "folder-out", "refs-folder"])
        name = rng.choice([*sorted(refs), "heads/linked"])
        path = md / "refs" / name
        if how == "refs-folder":  # the whole refs/heads folder a link to one outside the remote
            (outside / "heads").mkdir(exist_ok=True)
            (outside / "heads" / "main").write_text(ids[-1] + "\n", encoding="utf-8")
            shutil.rmtree(heads)
            os.symlink(outside / "heads", heads)
            changed.update(n for n in refs if n.startswith("heads/"))
            ops.append("refs/heads is a link out of the remote")
            return
        _write_ref(path, b"")
        path.unlink()
        if how == "to-ref":
            os.symlink(refs[rng.choice(sorted(refs))] if refs else "main", path)
        elif how == "dev-zero":
            os.symlink("/dev/zero", path)
        elif how == "out":
            secret = outside / "secret"
            secret.write_text(ids[-1] + "\n", encoding="utf-8")
            os.symlink(secret, path)
        elif how == "dangling":
            os.symlink(outside / "missing", path)
        elif how == "loop":
            os.symlink(path.name, path)
        elif how == "folder-out":
            path.unlink(missing_ok=True)
            (outside / "folder").mkdir(exist_ok=True)
            (outside / "folder" / "x").write_text(ids[0] + "\n", encoding="utf-8")
            os.symlink(outside / "folder", path)
        changed.add(name)
        ops.append(f"{name} is a link ({how})")
    elif op == "special":
        name = rng.choice([*sorted(refs), "heads/special"])
        path = md / "refs" / name
        _write_ref(path, b"")
        path.unlink()
        if rng.random() < 0.5:
            os.mkfifo(path)
            ops.append(f"{name} is a FIFO")
        else:
            path.mkdir()
            ops.append(f"{name} is an empty folder")
        changed.add(name)
    elif op == "past-cap":
        many = heads / "many"
        many.mkdir(parents=True, exist_ok=True)
        target = rng.choice(ids) + "\n"
        first = many / "0"
        for i in range(cap + 1 - len(refs) + rng.randint(0, 2)):  # the seed's refs count too
            if i % 50_000 == 0:  # hard links of one file (ext4 takes 65,000 of them)
                first = many / str(i)
                first.write_text(target, encoding="utf-8")
            else:
                os.link(first, many / str(i))
        ops.append(f"a listing of {cap + 1}+ refs (cap {cap})")


@contextlib.contextmanager
def _vanishing(refs: list[tuple[Path, bytes]], rng: random.Random):
    """While the block runs, the refs disappear and come back (each return a whole file, renamed into place, as
    a writer writes a ref), on a thread of their own, at most _VANISH_TOGGLES times."""
    if not refs:
        yield
        return
    stop = threading.Event()
    order = [rng.randrange(len(refs)) for _ in range(64)]

    def churn() -> None:
        for i in range(_VANISH_TOGGLES):
            if stop.is_set():
                return
            path, data = refs[order[i % len(order)]]
            try:
                if path.exists():
                    path.unlink()
                else:
                    temp = path.with_name(f".{path.name}.tmp")
                    temp.write_bytes(data)
                    os.replace(temp, path)
            except OSError:
                pass

    thread = threading.Thread(target=churn, name="vanishing-refs", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def run_remote_targets(remote: Path, seed: Path, oracle: dict, changed: set[str], workdir: Path, record) -> None:
    """What a victim runs against a remote someone else prepared. A clone's branch that the remote did not
    change must name what the seed's names, and every commit fetched must hold its oracle state."""
    from mdiff.repo import Repository
    from mdiff.repo.remotes import open_end, tracking_refs
    from mdiff.updates.base import sha256_hex

    url = str(remote)
    seed_refs = {name: path.read_text(encoding="utf-8").strip() for name, path in _ref_files(seed / ".mdiff").items()}

    def states_hold(repo, commit_ids) -> None:
        for commit_id in sorted(commit_ids):
            if commit_id not in oracle:
                raise _Lie(f"{commit_id[:12]}… was fetched, which the remote does not hold")
            got = {name: sha256_hex(value) for name, value in repo.state(commit_id).items()}
            if got != oracle[commit_id]:
                raise _Lie(f"the fetched {commit_id[:12]}… holds other weights than its id means, without an error")

    record("remote.refs", lambda: open_end(url).refs())

    def clone():
        folder = workdir / "current-clone"
        shutil.rmtree(folder, ignore_errors=True)
        repo, _ = Repository.clone(url, folder)
        for name, target in tracking_refs(repo, "origin").items():
            if f"heads/{name}" in seed_refs and f"heads/{name}" not in changed and target != seed_refs[f"heads/{name}"]:
                raise _Lie(f"origin/{name} names {target[:12]}…, the remote's unchanged ref {seed_refs['heads/' + name][:12]}…")
        states_hold(repo, repo.commit_ids())
        return True

    record("remote.clone", clone)

    def fetch_revision():
        cache = workdir / "current-revision-cache"
        shutil.rmtree(cache, ignore_errors=True)
        repo, commit_id = Repository.fetch_revision(url, "main", cache)
        if "heads/main" not in changed and commit_id != seed_refs.get("heads/main"):
            raise _Lie(f"main resolved to {commit_id[:12]}…, not the remote's unchanged main")
        states_hold(repo, [commit_id])
        return True

    record("remote.fetch-revision", fetch_revision)


# ---------------------------------------------------------------- targets


def run_repository_targets(project: Path, oracle: dict, record) -> None:
    """What a victim runs in a repository someone else prepared. ``record(target, fn)`` classifies."""
    from mdiff.repo import Repository
    from mdiff.repo.history import resolve, topological
    from mdiff.updates.base import sha256_hex

    repo = record("repo.open", lambda: Repository.find(project))
    if repo is None:
        return
    branches = record("repo.branches", lambda: {name: target for name, target in repo.branches().items()})

    def log_all():
        heads = sorted({t for t in (branches or {}).values() if t})
        for commit_id in topological(repo, heads):
            repo.metadata(commit_id)
        return True

    record("repo.log", log_all)
    record("repo.revision", lambda: resolve(repo, _HUGE_REVISION))
    record("repo.fsck", lambda: repo.fsck())
    for commit_id, expected in sorted(oracle.items()):
        def checkout(commit_id=commit_id, expected=expected):
            state = repo.state(commit_id)
            got = {name: sha256_hex(value) for name, value in state.items()}
            if got != expected:
                raise _Lie(f"checkout of {commit_id[:12]}… returned other weights than the commit's, without an error")
            return True

        record("repo.checkout", checkout)


class _Lie(Exception):
    """A result that is wrong although no error was raised: classified BADRESULT."""


def run_checkpoint_targets(path: Path, seed: Path, record) -> None:
    from mdiff.checkpoints import open_checkpoint
    from mdiff.diffing import diff_mappings

    def read_all():
        with open_checkpoint(path) as ckpt:
            for name in ckpt.keys():
                ckpt.spec(name)
                ckpt.read(name)
        return True

    if record("checkpoint.read", read_all) is None:
        return

    def diff_against_seed():
        with open_checkpoint(seed) as old, open_checkpoint(path) as new:
            for _name, _update in diff_mappings(old, new):
                pass
        return True

    record("checkpoint.diff", diff_against_seed)


def run_task(task: dict, workdir: Path, record) -> list[str]:
    """Build the task's input under ``workdir`` and run its targets; returns the mutation's ops."""
    rng = random.Random(task["rng"])
    seed = Path(task["seed"])
    if task["family"] == "repository":
        oracle = json.loads((seed.parent / "oracle.json").read_text(encoding="utf-8"))
        project = workdir / "current-repository"
        # about one repository task in three also gets a poisoned cache (its own stream: the other tasks'
        # mutations, and so their reproducing numbers, are as before)
        cache_rng = random.Random(f"{task['rng']}:cache")
        cache = workdir / "cache" if cache_rng.random() < CACHE_SHARE else None
        ops = []
        if cache is not None:
            _fill_cache(seed, cache, oracle)
            ops += mutate_cache(cache, cache_rng)
        ops = mutate_repository(seed, project, rng, oracle) + ops
        record.started(ops)
        if cache is None:
            run_repository_targets(project, oracle, record)
        else:
            with _cache_folder(cache):
                run_repository_targets(project, oracle, record)
                record("repo.cache", lambda: _cache_changes_nothing(project, oracle, cache))
    elif task["family"] == "remote":
        from mdiff.repo import remote_ends

        oracle = json.loads((seed.parent / "oracle.json").read_text(encoding="utf-8"))
        cap = task.get("cap") or remote_ends.MAX_REMOTE_REFS
        remote_ends.MAX_REMOTE_REFS = cap  # a worker's setting, as --limit is a reader's (the reference: 100,000)
        remote = workdir / "current-remote"
        ops, changed, vanishing = mutate_remote_listing(seed, remote, rng, oracle, cap)
        record.started(ops)
        with _vanishing(vanishing, random.Random(f"{task['rng']}:vanish")):
            run_remote_targets(remote, seed, oracle, changed, workdir, record)
    else:
        target = workdir / f"current-checkpoint{seed.suffix}"
        ops = mutate_checkpoint(seed, target, rng)
        record.started(ops)
        run_checkpoint_targets(target, seed, record)
    return ops

