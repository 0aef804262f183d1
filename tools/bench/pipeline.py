#!/usr/bin/env python3
"""Issue 32's figures: what a commit and a checkout of a large model cost, beside the peers, in CPU seconds.

The pair: N tensors of 4096×4096 float32 (16 × = 1 GiB), the successor = base + 1e-4·randn (every value
changes), each a .safetensors file. Every trial runs in a fresh child process, so that each pays the same
start-up and nothing is shared in memory; the child reports the CPU of the operation alone — its own,
its threads', and its children's (the isolated reader's child is closed and reaped before it reports) —
and of its main thread (time.thread_time), and the wall time. Contenders are rotated every repetition;
the report gives medians and the load average.

  commit    mdiff, twice: `Repository.commit(new.safetensors)` on a repository holding the base (defaults) —
            "parent replayed": a copy of a repository made elsewhere, so that nothing says which checkpoint it
              committed last, and the parent's values are replayed from its history (inflated, unshuffled, hashed);
            "predecessor known": as a user's second commit (`mdiff commit base.safetensors`, then
              `mdiff commit new.safetensors`, in one repository): before each trial the base is committed anew
              (untimed) at the very path the trial commits into, leaving the cache entries a user's first commit
              leaves (repo/parent_values.py, repo/state_cache.py), so the parent's values are read from
              base.safetensors (and hashed, to prove them). This is the like-for-like with ZipNN's delta, which
              reads base.safetensors too. Both read the parent's commit file whole once (its id checked, MD800).
            ZipNN 0.5.4 delta: both files loaded, each tensor delta-compressed against the base, fsynced
            zstd -3 -T2 of new.safetensors, fsynced          safetensors: load_file + save_file + fsync
  checkout  mdiff: `Repository.checkout("HEAD", out.safetensors)` (atomic, fsynced)
            ZipNN: the base and the delta decompressed, saved + fsync      zstd -d, fsynced
            safetensors: load_file
  floor     what SPEC.md requires of that commit and checkout, and nothing else, on every core (op_floor_commit,
            op_floor_checkout): the sha256 of every value and commit file the spec has checked, every chunk deflated
            with the bytes §11 fixes (zlib-ng) or inflated (ISA-L), the file written and fsynced. No delta, shuffle,
            HDF5 or metadata: the cost below which no conforming implementation goes, measured beside the peers
  threads   mdiff's commit and checkout wall time with MDIFF_THREADS=1 (one thread: one core) and with the machine's
            cores, and the cores each used (CPU ÷ wall)
  chain     a chain of commits (each successor = the last + 1e-4·randn): each commit's CPU, the last ÷ the first —
            `mdiff commit` of one file written over, a process each; and one process committing each version's
            own file, as a training loop or the Trainer's callback does

    python tools/bench/pipeline.py [--tensors 16] [--repeat 3] [--chain 20 --chain-tensors 4] [--json FILE]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import measuring  # noqa: E402

SIDE = 4096
DATE = "2026-01-01T00:00:00Z"


# ---------------------------------------------------------------- in the child: one operation, measured
def _cpu() -> tuple[float, float]:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def _user() -> float:
    """User CPU alone (this process and its reaped children): the kernel's share of a commit — page-cache
    writes, reclaim — swings 0.1–2 s from trial to trial on a loaded machine, the code's own work far less."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + kids.ru_utime


def _close_isolated_workers() -> None:
    """The isolated reader's child lives as long as this process: closed (and reaped) so that its CPU counts."""
    from mdiff import isolation

    for worker in list(isolation._WORKERS.values()):
        worker.close()


def _fsynced(path: Path, data: bytes) -> None:
    with open(path, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())


def _zipnn(delta: bool):
    import zipnn

    if delta:
        return zipnn.ZipNN(input_format="byte", bytearray_dtype="float32", delta_compressed_type="byte")
    return zipnn.ZipNN(input_format="byte", bytearray_dtype="float32")


def op_mdiff_commit(work: Path) -> None:
    from mdiff.repo import Repository

    name = (work / "to-commit").read_text() if (work / "to-commit").exists() else "new.safetensors"
    Repository(work / "repo").commit(str(work / name), "fine-tune", date=DATE)


def op_mdiff_commit_predecessor(work: Path) -> None:
    """The commit after `mdiff commit base.safetensors` in the same repository (reset_predecessor)."""
    from mdiff.repo import Repository

    Repository(work / AFTER_BASE / "repo").commit(str(work / "new.safetensors"), "fine-tune", date=DATE)


def op_mdiff_checkout(work: Path) -> None:
    from mdiff.repo import Repository

    Repository(work / "repo").checkout("HEAD", str(work / "out.safetensors"))


def op_zipnn_commit(work: Path) -> None:
    from safetensors.numpy import load_file

    base, new = load_file(str(work / "base.safetensors")), load_file(str(work / "new.safetensors"))
    codec = _zipnn(delta=True)
    (work / "zipnn").mkdir(exist_ok=True)
    for i, name in enumerate(sorted(new)):
        _fsynced(work / "zipnn" / f"{i}.delta", bytes(codec.compress(new[name].tobytes(),
                                                                      delta_second_data=base[name].tobytes())))


def op_zipnn_checkout(work: Path) -> None:
    import numpy as np
    from safetensors.numpy import save_file

    whole, delta = _zipnn(delta=False), _zipnn(delta=True)
    state = {}
    for i, name in enumerate(sorted(json.loads((work / "zipnn-index.json").read_text()))):
        base = bytes(whole.decompress((work / "zipnn" / f"{i}.base").read_bytes()))
        value = bytes(delta.decompress((work / "zipnn" / f"{i}.delta").read_bytes(), delta_second_data=base))
        state[name] = np.frombuffer(value, np.float32).reshape(SIDE, SIDE)
    save_file(state, str(work / "out.safetensors"))
    measuring.fsync_file(work / "out.safetensors")


def op_zstd_commit(work: Path) -> None:
    subprocess.run(["zstd", "-q", "-f", "-3", "-T2", str(work / "new.safetensors"), "-o", str(work / "new.zst")],
                   check=True)
    measuring.fsync_file(work / "new.zst")


def op_zstd_checkout(work: Path) -> None:
    subprocess.run(["zstd", "-q", "-f", "-d", str(work / "new.zst"), "-o", str(work / "out.safetensors")], check=True)
    measuring.fsync_file(work / "out.safetensors")


def op_safetensors_commit(work: Path) -> None:
    from safetensors.numpy import load_file, save_file

    save_file(load_file(str(work / "new.safetensors")), str(work / "out.safetensors"))
    measuring.fsync_file(work / "out.safetensors")


def op_safetensors_checkout(work: Path) -> None:
    from safetensors.numpy import load_file

    load_file(str(work / "new.safetensors"))




# ---------------------------------------------------------------- the floor: the spec's required work alone
FLOOR = "floor"  # the floor trials' inputs (prepare_floor)


def _file_id(path: str | Path) -> str:
    """A commit file's id as the repository computes it (§13.2: its block list's hash, mdiff.block_ids, for
    repository format 2), read and hashed 8 MiB at a time on mdiff's pool."""
    from mdiff import block_ids

    fd = os.open(path, os.O_RDONLY)
    try:
        blocks = block_ids.of_fd(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)
    assert blocks is not None
    return blocks.commit_id


def _value_hashes(path: Path, pool) -> list:
    """Each tensor of a .safetensors file read and hashed (sha256, §13.4), on the pool."""
    import hashlib

    with open(path, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(size))
    start = 8 + size

    def hashed(span: list[int]) -> str:
        buffer = bytearray(span[1] - span[0])
        with open(path, "rb", buffering=0) as f:
            f.seek(start + span[0])
            f.readinto(buffer)
        return hashlib.sha256(buffer).hexdigest()

    return [pool.submit(hashed, entry["data_offsets"]) for name, entry in header.items() if name != "__metadata__"]


def op_floor_commit(work: Path) -> None:
    """What SPEC.md requires of the predecessor-known commit, and nothing else, on every core: the new values'
    sha256 (§13.4's claims), the parent's values' (proof of the predecessor), the parent commit file's id (MD800),
    every chunk of the new file deflated as §11 fixes its bytes (zlib-ng, `deflate_rle`), the file written, fsynced
    and read back for its id. Left out: the delta, zigzag and shuffle (their output is read ready-made from
    prepare_floor's file), HDF5, the metadata and the repository's small files."""
    from concurrent.futures import ThreadPoolExecutor

    from mdiff.format.writer import deflate_rle

    index = json.loads((work / FLOOR / "index.json").read_text())
    with ThreadPoolExecutor(os.cpu_count()) as pool:
        waits = [*_value_hashes(work / "new.safetensors", pool), *_value_hashes(work / "base.safetensors", pool),
                 pool.submit(_file_id, index["files"]["parent"])]

        def deflated(span: list[int]) -> bytes:
            with open(work / FLOOR / "shuffled.bin", "rb", buffering=0) as f:
                return deflate_rle(os.pread(f.fileno(), span[1], span[0]))

        spans, at = [], 0
        for _, _, size in index["chunks"]["head"]:
            spans.append([at, size])
            at += size
        with open(work / FLOOR / "written.mdiff", "wb") as out:
            for stream in pool.map(deflated, spans):
                out.write(stream)
            out.flush()
            os.fsync(out.fileno())
        _file_id(work / FLOOR / "written.mdiff")
        for wait in waits:
            wait.result()


def op_floor_checkout(work: Path) -> None:
    """What SPEC.md requires of the checkout, and nothing else, on every core: both commit files' ids (§13.2),
    every chunk of both inflated (ISA-L, mdiff's inflater), and 1 GiB of values hashed (§9.3), written and fsynced.
    Left out: the unshuffle and the delta's addition (the base's inflated chunks stand in for the values), HDF5,
    the metadata."""
    import hashlib
    from concurrent.futures import ThreadPoolExecutor

    try:
        from isal import isal_zlib as inflater
    except ImportError:  # pragma: no cover
        import zlib as inflater

    index = json.loads((work / FLOOR / "index.json").read_text())
    with ThreadPoolExecutor(os.cpu_count()) as pool:
        waits = [pool.submit(_file_id, index["files"][role]) for role in ("parent", "head")]

        def inflated(role: str, chunk: list[int]) -> bytes:
            with open(index["files"][role], "rb", buffering=0) as f:
                return inflater.decompress(os.pread(f.fileno(), chunk[1], chunk[0]))

        def value(chunk: list[int]) -> bytes:
            raw = inflated("parent", chunk)
            hashlib.sha256(raw).digest()
            return raw

        heads = [pool.submit(lambda chunk: len(inflated("head", chunk)), chunk) for chunk in index["chunks"]["head"]]
        with open(work / "out.safetensors", "wb") as out:
            for raw in pool.map(value, index["chunks"]["parent"]):
                out.write(raw)
            out.flush()
            os.fsync(out.fileno())
        for wait in (*waits, *heads):
            wait.result()


def _chunked(f) -> list:
    """The chunked datasets of an open h5py file."""
    import h5py

    datasets: list = []
    f.visititems(lambda name, o: datasets.append(o) if isinstance(o, h5py.Dataset) and o.chunks else None)
    return datasets


def prepare_floor(work: Path) -> None:
    """The floor trials' inputs: where each chunk of the repository's two commit files lies, and the new file's
    chunks inflated (shuffled, zigzagged deltas) into one file, as the commit's encoder receives them."""
    import zlib

    import h5py

    from mdiff.repo import Repository

    commits = work / "committed" / ".mdiff" / "commits"  # SPEC.md §13.1: commits/<id>.mdiff
    head = Repository(work / "committed").head()[1]
    files = {"head": commits / f"{head}.mdiff", "parent": next(p for p in commits.glob("*.mdiff") if p.stem != head)}
    chunks: dict = {"head": [], "parent": []}
    (work / FLOOR).mkdir(exist_ok=True)
    with open(work / FLOOR / "shuffled.bin", "wb") as shuffled:
        for role, path in files.items():
            with h5py.File(path, "r") as f:
                for dataset in _chunked(f):
                    for i in range(dataset.id.get_num_chunks()):
                        info = dataset.id.get_chunk_info(i)
                        raw = zlib.decompress(dataset.id.read_direct_chunk(info.chunk_offset)[1])
                        chunks[role].append([info.byte_offset, info.size, len(raw)])
                        if role == "head":
                            shuffled.write(raw)
    (work / FLOOR / "index.json").write_text(json.dumps({"files": {k: str(v) for k, v in files.items()},
                                                         "chunks": chunks}))


OPERATIONS = {name[3:]: fn for name, fn in globals().items() if name.startswith("op_")}


def child(op: str, work: Path) -> None:
    """Run one operation here and print what it cost as JSON (the last line of stdout)."""
    import numpy  # noqa: F401  (imported before the clock starts: every contender needs it)

    if op.startswith("mdiff"):
        import mdiff.repo.repository  # noqa: F401
    if op.startswith("floor"):
        import mdiff.format.writer  # noqa: F401
    cpu0, kids0, main0, wall0, user0 = *_cpu(), time.thread_time(), time.perf_counter(), _user()
    OPERATIONS[op](work)
    wall, main = time.perf_counter() - wall0, time.thread_time() - main0
    _close_isolated_workers()
    cpu1, kids1 = _cpu()
    print(json.dumps({"cpu": cpu1 - cpu0 + kids1 - kids0, "user": _user() - user0, "main": main, "wall": wall}))


# ---------------------------------------------------------------- in the parent: files, trials, report
def trial(op: str, work: Path, threads: int | None = None) -> dict:
    env = dict(os.environ)
    if threads is not None:
        env["MDIFF_THREADS"] = str(threads)
    done = subprocess.run([sys.executable, __file__, "--child", op, str(work)], capture_output=True, text=True, env=env)
    if done.returncode:
        raise RuntimeError(f"{op} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def make_pair(work: Path, tensors: int, seed: int = 0) -> None:
    import numpy as np
    from safetensors.numpy import save_file

    rng = np.random.default_rng(seed)
    base = {f"layer.{i:02d}.weight": rng.standard_normal((SIDE, SIDE), np.float32) for i in range(tensors)}
    save_file(base, str(work / "base.safetensors"))
    new = {k: (v + np.float32(1e-4) * rng.standard_normal(v.shape, np.float32)).astype(np.float32)
           for k, v in base.items()}
    save_file(new, str(work / "new.safetensors"))


def prepare(work: Path) -> None:
    """The repository holding the base (kept as a template), mdiff's commit of the new state, and the peers'
    files that their checkouts read."""
    from safetensors.numpy import load_file

    from mdiff.repo import Repository

    template = work / "template"
    Repository.init(template).commit(str(work / "base.safetensors"), "base", date=DATE)
    shutil.copytree(template, work / "repo", symlinks=True)
    op_mdiff_commit(work)
    if "zipnn" in PEERS:
        base = load_file(str(work / "base.safetensors"))
        (work / "zipnn-index.json").write_text(json.dumps(sorted(base)))
        whole = _zipnn(delta=False)
        (work / "zipnn").mkdir(exist_ok=True)
        for i, name in enumerate(sorted(base)):
            _fsynced(work / "zipnn" / f"{i}.base", bytes(whole.compress(base[name].tobytes())))
        op_zipnn_commit(work)
    if "zstd" in PEERS:
        op_zstd_commit(work)


AFTER_BASE = "after-base"  # the folder of the "predecessor known" trial's repository


def reset_predecessor(work: Path) -> None:
    """The "predecessor known" trial starts as a user's second commit: the base committed (again) in a new
    repository at the very path the trial commits into, leaving what that commit leaves in the cache folder —
    the entry saying which checkpoint it committed (keyed by the repository's real path: a copy made elsewhere
    has none), and the summary of its state (which the trial's own commit drops)."""
    from mdiff.repo import Repository, parent_values

    folder = work / AFTER_BASE
    if folder.exists():
        shutil.rmtree(folder)
    repo = Repository.init(folder / "repo")
    repo.commit(str(work / "base.safetensors"), "base", date=DATE)
    last = parent_values.recall(repo.dir)
    if last is None or last[0] != repo.head()[1]:
        raise RuntimeError("the commit of the base left no cache entry (is MDIFF_CACHE_DIR off?): the "
                           "predecessor-known trial would replay the parent")


def reset_repository(work: Path, committed: bool) -> None:
    """A commit trial starts from the base alone; a checkout trial from the base and mdiff's commit."""
    shutil.rmtree(work / "repo")
    shutil.copytree(work / ("committed" if committed else "template"), work / "repo", symlinks=True)


# the peers this machine has (tools/bench/requirements.txt installs ZipNN; zstd is Debian's): the others are left out
PEERS = ("mdiff", *(("zipnn",) if importlib.util.find_spec("zipnn") else ()), *(("zstd",) if shutil.which("zstd") else ()),
         "safetensors")
COMMITS = ("mdiff_commit", "mdiff_commit_predecessor", "floor_commit", *(f"{who}_commit" for who in PEERS[1:]))
CHECKOUTS = ("floor_checkout", *(f"{who}_checkout" for who in PEERS))


def race(work: Path, repeat: int, model_bytes: int, log) -> dict:
    shutil.copytree(work / "repo", work / "committed", symlinks=True)
    prepare_floor(work)
    results: dict = {op: [] for op in COMMITS + CHECKOUTS}
    threads: dict = {("commit", 1): [], ("commit", None): [], ("checkout", 1): [], ("checkout", None): []}
    for r in range(repeat):
        order = list(COMMITS + CHECKOUTS)
        order = order[r % len(order):] + order[:r % len(order)]
        for op in order:
            if op == "mdiff_commit_predecessor":
                reset_predecessor(work)
            elif op.startswith("mdiff"):
                reset_repository(work, committed=op.endswith("checkout"))
            measuring.prime(int(1.25 * model_bytes))
            results[op].append(trial(op, work))
            log(f"  {op}: {results[op][-1]}  (load {measuring.loadavg()})")
        for kind, n in ((k, t) for t in ((1, None) if r % 2 == 0 else (None, 1)) for k in ("commit", "checkout")):
            reset_repository(work, committed=kind == "checkout")
            measuring.prime(int(1.25 * model_bytes))
            threads[(kind, n)].append(trial(f"mdiff_{kind}", work, threads=n))
    return {"trials": results, "threads": {f"{k}-{'1' if n == 1 else 'all'}": v for (k, n), v in threads.items()}}


def chain(work: Path, length: int, tensors: int, log, distinct: bool = False) -> list[dict]:
    """Each commit of a chain, in a fresh process (as `mdiff commit` runs): its CPU. One file written over
    with each version, or (``distinct``) each version in its own file, committed by that path."""
    folder = work / ("chain-distinct" if distinct else "chain")
    folder.mkdir()
    _chain_root(folder, tensors)
    costs = []
    for i in range(length):
        version = folder / (f"v{i}.safetensors" if distinct else "new.safetensors")
        _next_version(folder / (f"v{i - 1}.safetensors" if distinct and i else "new.safetensors"), version, seed=i)
        (folder / "to-commit").write_text(version.name)
        costs.append(trial("mdiff_commit", folder))
        log(f"  chain commit {i + 1}: {costs[-1]}")
    return costs


def _chain_root(folder: Path, tensors: int) -> None:
    import numpy as np
    from safetensors.numpy import save_file

    from mdiff.repo import Repository

    rng = np.random.default_rng(1)
    save_file({f"layer.{i:02d}.weight": rng.standard_normal((SIDE, SIDE), np.float32) for i in range(tensors)},
              str(folder / "new.safetensors"))
    Repository.init(folder / "repo").commit(str(folder / "new.safetensors"), "root", date=DATE)


def _next_version(source: Path, target: Path, seed: int) -> None:
    import numpy as np
    from safetensors.numpy import load_file, save_file

    rng = np.random.default_rng(100 + seed)
    state = load_file(str(source))
    save_file({k: (v + np.float32(1e-4) * rng.standard_normal(v.shape, np.float32)).astype(np.float32)
               for k, v in state.items()}, str(target))


def op_chain_loop(work: Path) -> None:
    """A training loop's chain: one process, one Repository, each version its own file (as the Trainer's
    checkpoint-N folders); prints each commit's CPU (this process's threads) and main-thread CPU."""
    from mdiff.repo import Repository

    length = int((work / "length").read_text())
    repo = Repository(work / "repo")
    previous = work / "new.safetensors"
    for i in range(length):
        version = work / f"v{i}.safetensors"
        _next_version(previous, version, seed=i)
        cpu0, main0 = time.process_time(), time.thread_time()
        repo.commit(str(version), f"v{i}", date=DATE)
        print(json.dumps({"cpu": time.process_time() - cpu0, "main": time.thread_time() - main0}), flush=True)
        previous = version


def chain_loop(work: Path, length: int, tensors: int, log) -> list[dict]:
    folder = work / "loop"
    folder.mkdir()
    _chain_root(folder, tensors)
    (folder / "length").write_text(str(length))
    done = subprocess.run([sys.executable, __file__, "--child", "chain_loop", str(folder)], capture_output=True,
                          text=True)
    if done.returncode:
        raise RuntimeError(f"chain_loop failed:\n{done.stderr[-3000:]}")
    costs = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    for i, cost in enumerate(costs):
        log(f"  loop commit {i + 1}: {cost}")
    return costs


def median(values: list[dict], key: str) -> float:
    return statistics.median(v[key] for v in values)


def _shown(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds:.2f}"  # —: a peer this machine lacks


def _ratio(mine: float, theirs: float | None) -> str:
    return "—" if theirs is None else f"{mine / theirs:.2f}×"


_ROWS = (("commit (parent replayed)", "mdiff_commit", "commit"),
         ("commit (predecessor known)", "mdiff_commit_predecessor", "commit"),
         ("checkout", "mdiff_checkout", "checkout"),
         ("floor: a commit's required work alone", "floor_commit", "commit"),
         ("floor: a checkout's required work alone", "floor_checkout", "checkout"))


def medians(data: dict) -> dict:
    """Each row's medians: mdiff's CPU and main-thread CPU, the peers' CPU (None: a peer this machine lacks),
    and mdiff's ÷ ZipNN and ÷ zstd."""
    t, rows = data["race"]["trials"], {}
    for row, mine, kind in _ROWS:
        if not t.get(mine):  # figures of a run from before the predecessor-known trial
            continue
        m = median(t[mine], "cpu")
        peers = {who: median(t[f"{who}_{kind}"], "cpu") if t.get(f"{who}_{kind}") else None
                 for who in ("zipnn", "zstd", "safetensors")}
        rows[row] = {"mdiff": m, "main": median(t[mine], "main"), **peers,
                     "per_zipnn": None if peers["zipnn"] is None else m / peers["zipnn"],
                     "per_zstd": None if peers["zstd"] is None else m / peers["zstd"]}
    return rows


def report(data: dict) -> str:
    lines = [f"{data['machine']}; load before {data['load_before']}, after {data['load_after']}; "
             f"{data['tensors']} tensors of {SIDE}×{SIDE} float32 ({data['model_bytes'] / (1 << 30):.2f} GiB), "
             f"medians of {data['repeat']}", "",
             "| operation | mdiff CPU s | main thread | ZipNN delta | zstd | safetensors | ÷ ZipNN | ÷ zstd |",
             "|---|---|---|---|---|---|---|---|"]
    for row, f in medians(data).items():
        m, main, z, s, st = f["mdiff"], f["main"], f["zipnn"], f["zstd"], f["safetensors"]
        lines.append(f"| {row} | {m:.2f} | {main:.2f} ({main / m:.0%}) | {_shown(z)} | {_shown(s)} | {st:.2f} | "
                     f"{_ratio(m, z)} | {_ratio(m, s)} |")
    th = data["race"]["threads"]
    lines += ["", "| mdiff wall s (cores used: CPU ÷ wall) | 1 thread | all cores | all ÷ 1 |", "|---|---|---|---|"]
    for kind in ("commit", "checkout"):
        one, every = median(th[f"{kind}-1"], "wall"), median(th[f"{kind}-all"], "wall")
        used = [statistics.median(r["cpu"] / r["wall"] for r in th[f"{kind}-{n}"]) for n in ("1", "all")]
        lines.append(f"| {kind} | {one:.2f} ({used[0]:.2f}) | {every:.2f} ({used[1]:.2f}) | {every / one:.2f}× |")
    for key, how in (("chain", "`mdiff commit` of one file written over, a process each"),
                     ("chain_distinct", "`mdiff commit` of each version's own file, a process each"),
                     ("loop", "one process committing each version's own file (a training loop)")):
        if data.get(key):
            cpus = [c["cpu"] for c in data[key]]
            lines += ["", f"chain of {len(cpus)} commits ({data['chain_tensors']} tensors), {how}: CPU s "
                          + ", ".join(f"{c:.2f}" for c in cpus) + f"; last ÷ first {cpus[-1] / cpus[0]:.2f}×"]
            if all("user" in c for c in data[key]):
                users = [c["user"] for c in data[key]]
                lines += [f"(of which user CPU s {', '.join(f'{u:.2f}' for u in users)}; last ÷ first "
                          f"{users[-1] / users[0]:.2f}×)"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensors", type=int, default=16, help="4096×4096 float32 tensors (16: 1 GiB)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--chain", type=int, default=20, help="commits of the chain (0: none)")
    parser.add_argument("--chain-tensors", type=int, default=4)
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    parser.add_argument("--child", nargs=2, metavar=("OP", "WORK"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child and args.child[0] == "chain_loop":
        op_chain_loop(Path(args.child[1]))
        return 0
    if args.child:
        child(args.child[0], Path(args.child[1]))
        return 0

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="mdiff-pipeline-", dir=os.environ.get("MDIFF_BENCH_DIR")) as tmp:
        work = Path(tmp)
        data: dict = {"machine": measuring.machine(), "load_before": measuring.loadavg(), "tensors": args.tensors,
                      "repeat": args.repeat, "model_bytes": args.tensors * SIDE * SIDE * 4,
                      "chain_tensors": args.chain_tensors}
        log("making the pair and the peers' files…")
        make_pair(work, args.tensors)
        prepare(work)
        data["race"] = race(work, args.repeat, data["model_bytes"], log)
        data["chain"] = chain(work, args.chain, args.chain_tensors, log) if args.chain else []
        data["chain_distinct"] = chain(work, args.chain, args.chain_tensors, log, distinct=True) if args.chain else []
        data["loop"] = chain_loop(work, args.chain, args.chain_tensors, log) if args.chain else []
        data["load_after"] = measuring.loadavg()
    data["medians"] = medians(data)
    text = report(data)
    print(text)
    if args.json:
        args.json.write_text(json.dumps(data, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
