"""The command line: exit codes, JSON output, file round trips, determinism, no tracebacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import mdiff
from mdiff.checkpoints import load_checkpoint, save_checkpoint
from mdiff.cli.main import main
from tests.helpers import ALL_DTYPES, bits_equal, random_tensor, with_specials

DATE = "2026-03-04T05:06:07Z"


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def checkpoints(tmp_path):
    """OLD and NEW safetensors checkpoints covering every dtype, an added and a removed parameter."""
    old, new = {}, {}
    for i, dtype in enumerate(ALL_DTYPES):
        base = with_specials(random_tensor(dtype, (17, 9), i), dtype)
        old[f"layer.{dtype}"] = base
        changed = base.copy()
        changed.reshape(-1)[::5] = random_tensor(dtype, changed.reshape(-1)[::5].shape, 100 + i)
        new[f"layer.{dtype}"] = changed
    old["removed"] = np.arange(4, dtype=np.int64)
    new["added/new"] = np.ones((2, 2), dtype=ml_dtypes.bfloat16)
    save_checkpoint(tmp_path / "old.safetensors", old)
    save_checkpoint(tmp_path / "new.safetensors", new)
    return tmp_path, old, new


def test_diff_then_apply_reproduces_new_checkpoint_byte_for_byte(capsys, checkpoints):
    d, _old, new = checkpoints
    code, out, _ = run(capsys, "diff", d / "old.safetensors", d / "new.safetensors", "-o", d / "c.mdiff", "-m", "step 1",
                       "--author", "Ada Lovelace <ada@example.org>", "--date", DATE, "--meta", "lr=1e-5", "--meta", "seed=3")
    assert code == 0 and "wrote" in out
    code, out, _ = run(capsys, "apply", d / "old.safetensors", d / "c.mdiff", "-o", d / "out.safetensors")
    assert code == 0 and "verified" in out
    result = load_checkpoint(d / "out.safetensors")
    assert set(result) == set(new)
    for name in new:
        assert bits_equal(result[name], new[name]), name
    assert (d / "out.safetensors").read_bytes() == (d / "new.safetensors").read_bytes()
    with mdiff.open(d / "c.mdiff") as diff:
        c = diff.commit
        assert (c.message, c.author.name, c.author.email, c.date, dict(c.meta)) == (
            "step 1", "Ada Lovelace", "ada@example.org", DATE, {"lr": "1e-5", "seed": "3"})
        assert diff["removed"].type == "delete" and diff["added/new"].type == "replace"


@pytest.mark.parametrize("version,format_version,datasets", [
    (None, "1.3", {"dense": ["sub"], "sparse": ["gaps", "sub"]}),  # the default: version 2 (§7.3, §7.4)
    (1, "1.2", {"dense": ["xor"], "sparse": ["indices", "xor"]}),  # for readers of format 1.2 and older
    (2, "1.3", {"dense": ["sub"], "sparse": ["gaps", "sub"]}),
])
def test_diff_writes_the_update_version_asked_for(capsys, checkpoints, version, format_version, datasets):
    d, _old, new = checkpoints
    flag = [] if version is None else ["--update-version", version]
    code, _, _ = run(capsys, "diff", d / "old.safetensors", d / "new.safetensors", "-o", d / "c.mdiff", "--date", DATE, *flag)
    assert code == 0
    with mdiff.open(d / "c.mdiff") as diff:
        assert diff.version == format_version
        kinds = {(u.type, u.meta["version"], tuple(sorted(u.data))) for name, u in diff.items() if name.startswith("layer.")
                 and name != "layer.bool"}
        assert kinds == {(t, 1 if version == 1 else 2, tuple(names)) for t, names in datasets.items()}
        assert (diff["layer.bool"].meta["version"], sorted(diff["layer.bool"].data)) == (1, ["xor"])  # bool: XOR only
    code, _, _ = run(capsys, "apply", d / "old.safetensors", d / "c.mdiff", "-o", d / "out.safetensors")
    assert code == 0 and (d / "out.safetensors").read_bytes() == (d / "new.safetensors").read_bytes()
    assert run(capsys, "diff", d / "old.safetensors", d / "new.safetensors", "--update-version", "3")[0] == 2


def test_npz_round_trip(capsys, tmp_path):
    old = {"w": np.arange(12, dtype=np.float32).reshape(3, 4), "flag": np.array(True)}
    new = {"w": old["w"] * 3, "flag": np.array(False)}
    save_checkpoint(tmp_path / "a.npz", old)
    save_checkpoint(tmp_path / "b.npz", new)
    assert run(capsys, "diff", tmp_path / "a.npz", tmp_path / "b.npz", "-o", tmp_path / "d.mdiff", "--date", DATE)[0] == 0
    assert run(capsys, "apply", tmp_path / "a.npz", tmp_path / "d.mdiff", "-o", tmp_path / "c.npz")[0] == 0
    with np.load(tmp_path / "c.npz", allow_pickle=False) as got:
        assert got["w"].tolist() == new["w"].tolist() and got["flag"].shape == () and not got["flag"]


def test_two_diffs_with_the_same_inputs_and_date_are_byte_identical(capsys, checkpoints, monkeypatch):
    d, _, _ = checkpoints
    for out in ("x.mdiff", "y.mdiff"):
        run(capsys, "diff", d / "old.safetensors", d / "new.safetensors", "-o", d / out, "--date", DATE, "-m", "m")
    assert (d / "x.mdiff").read_bytes() == (d / "y.mdiff").read_bytes()
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    for out in ("e1.mdiff", "e2.mdiff"):
        run(capsys, "diff", d / "old.safetensors", d / "new.safetensors", "-o", d / out)
    assert (d / "e1.mdiff").read_bytes() == (d / "e2.mdiff").read_bytes()
    with mdiff.open(d / "e1.mdiff") as diff:
        assert diff.commit.date == "2023-11-14T22:13:20Z"


def test_validate_exit_codes_and_json(capsys, checkpoints):
    d, _, _ = checkpoints
    run(capsys, "diff", d / "old.safetensors", d / "new.safetensors", "-o", d / "ok.mdiff", "--date", DATE)
    (d / "text.mdiff").write_text("not hdf5")
    code, out, _ = run(capsys, "validate", d / "ok.mdiff", "--json")
    assert code == 0 and json.loads(out) == {"file": str(d / "ok.mdiff"), "valid": True, "data_checked": True,
                                      "findings": []}
    code, out, _ = run(capsys, "validate", d / "text.mdiff", "--json")
    report = json.loads(out)
    assert code == 2 and report["valid"] is False and [f["code"] for f in report["findings"]] == ["MD100"]
    assert set(report["findings"][0]) == {"code", "severity", "path", "section", "message"}
    import h5py
    with h5py.File(d / "ok.mdiff", "r+") as f:
        del f.attrs["format_version"]
    code, out, _ = run(capsys, "validate", d / "ok.mdiff")
    assert code == 1 and "MD102 error / §3.2" in out and "INVALID" in out


def test_dump_lists_every_parameter_with_its_details(capsys, checkpoints):
    d, _, new = checkpoints
    run(capsys, "diff", d / "old.safetensors", d / "new.safetensors", "-o", d / "c.mdiff", "--date", DATE, "-m", "hello")
    code, out, _ = run(capsys, "dump", d / "c.mdiff", "--json")
    info = json.loads(out)
    assert code == 0 and info["commit"]["message"] == "hello"
    by_name = {p["name"]: p for p in info["parameters"]}
    assert by_name["removed"]["type"] == "delete" and by_name["added/new"]["type"] == "replace"
    f32 = by_name["layer.float32"]
    assert (f32["shape"], f32["dtype"], f32["type"], f32["nnz"]) == ([17, 9], "float32", "sparse", 31)
    assert info["totals"]["parameters"] == len(by_name) == len(ALL_DTYPES) + 2
    code, out, _ = run(capsys, "dump", d / "c.mdiff", "--values", "2")
    # version 2 (§7.4): positions 0 and 5 stored as gaps 0 and 4
    assert code == 0 and "layer.float32" in out and "hello" in out and "gaps: [0, 4]" in out


def test_apply_refuses_a_mismatched_base_before_writing(capsys, tmp_path):
    save_checkpoint(tmp_path / "a.safetensors", {"w": np.zeros(4, np.float32)})
    save_checkpoint(tmp_path / "b.safetensors", {"w": np.ones(4, np.float32)})
    save_checkpoint(tmp_path / "other.safetensors", {"w": np.zeros(5, np.float32)})
    run(capsys, "diff", tmp_path / "a.safetensors", tmp_path / "b.safetensors", "-o", tmp_path / "d.mdiff")
    code, _, err = run(capsys, "apply", tmp_path / "other.safetensors", tmp_path / "d.mdiff", "-o", tmp_path / "o.safetensors")
    assert code == 1 and "MD601" in err and not (tmp_path / "o.safetensors").exists()
    code, out, _ = run(capsys, "apply", tmp_path / "other.safetensors", tmp_path / "d.mdiff", "-o", tmp_path / "o.safetensors", "--json")
    assert code == 1 and json.loads(out)["error"]["code"] == "MD601"


def test_apply_to_the_wrong_base_of_the_same_shape_says_so(capsys, tmp_path):
    save_checkpoint(tmp_path / "a.safetensors", {"w": np.zeros(4, np.float32)})
    save_checkpoint(tmp_path / "b.safetensors", {"w": np.ones(4, np.float32)})
    save_checkpoint(tmp_path / "c.safetensors", {"w": np.full(4, 2, np.float32)})
    run(capsys, "diff", tmp_path / "a.safetensors", tmp_path / "b.safetensors", "-o", tmp_path / "d.mdiff")
    code, _, err = run(capsys, "apply", tmp_path / "c.safetensors", tmp_path / "d.mdiff", "-o", tmp_path / "o.safetensors")
    assert code == 1 and not (tmp_path / "o.safetensors").exists()
    assert err.startswith("mdiff: error MD603: the base is not the one this diff was made from: its 'w' has sha256 "), err


def test_bad_metadata_is_refused_with_its_code(capsys, checkpoints):
    d, _, _ = checkpoints
    code, _, err = run(capsys, "diff", d / "old.safetensors", d / "new.safetensors", "-o", d / "c.mdiff", "--parent", "abc")
    assert code == 1 and "MD202" in err and not (d / "c.mdiff").exists()
    assert not [p for p in os.listdir(d) if p.endswith(".tmp")]


def test_console_script_never_prints_a_traceback(tmp_path):
    garbage = tmp_path / "g.mdiff"
    garbage.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(200))  # an HDF5 signature and nothing behind it
    for argv in (["validate", garbage], ["dump", garbage], ["apply", garbage, garbage, "-o", tmp_path / "o.npz"],
                 ["dump", tmp_path / "missing.mdiff"]):
        proc = subprocess.run([sys.executable, "-m", "mdiff.cli.main", *map(str, argv)], capture_output=True, text=True)
        assert proc.returncode in (1, 2), (argv, proc.stderr)
        assert "Traceback" not in proc.stderr + proc.stdout


def test_help_names_every_command(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0
    for command in ("validate", "dump", "diff", "apply"):
        assert command in out


def test_a_parameter_safetensors_cannot_name_is_refused_with_a_code(capsys, tmp_path):
    """A diff may add a parameter called __metadata__; safetensors reserves that key (MD703)."""
    save_checkpoint(tmp_path / "a.npz", {"w": np.zeros(2, np.float32)})
    mdiff.write(tmp_path / "d.mdiff", {"__metadata__": mdiff.replace(np.ones(2, np.float32))})
    save_checkpoint(tmp_path / "a.safetensors", {"w": np.zeros(2, np.float32)})
    code, _, err = run(capsys, "apply", tmp_path / "a.safetensors", tmp_path / "d.mdiff", "-o", tmp_path / "o.safetensors")
    assert code == 1 and "MD703" in err and not (tmp_path / "o.safetensors").exists()
    assert run(capsys, "apply", tmp_path / "a.npz", tmp_path / "d.mdiff", "-o", tmp_path / "o.npz")[0] == 0


# ---------------------------------------------------------------- conventions a git user expects


def test_the_author_comes_from_the_option_the_environment_or_git_config(tmp_path, capsys, monkeypatch):
    from mdiff.repo import Repository

    save_checkpoint(tmp_path / "a.safetensors", {"w": np.zeros(3, np.float32)})
    save_checkpoint(tmp_path / "b.safetensors", {"w": np.ones(3, np.float32)})
    repo = Repository.init(tmp_path / "r")
    code, _, err = run(capsys, "commit", tmp_path / "a.safetensors", "-m", "a", "-C", repo.root)
    assert code == 0 and "no author is set" in err and "git config user.name" in err
    gitconfig = tmp_path / "gitconfig"
    gitconfig.write_text("[user]\n\tname = Grace Hopper\n\temail = grace@example.org\n", encoding="utf-8")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(gitconfig))
    assert run(capsys, "commit", tmp_path / "b.safetensors", "-m", "b", "-C", repo.root)[0] == 0
    assert repo.metadata(repo.head()[1]).author == mdiff.Author("Grace Hopper", "grace@example.org")
    monkeypatch.setenv("MDIFF_AUTHOR_NAME", "Ada")
    monkeypatch.setenv("MDIFF_AUTHOR_EMAIL", "ada@example.org")
    assert run(capsys, "commit", tmp_path / "a.safetensors", "-m", "a again", "-C", repo.root)[0] == 0
    assert repo.metadata(repo.head()[1]).author == mdiff.Author("Ada", "ada@example.org")
    assert run(capsys, "commit", tmp_path / "b.safetensors", "-m", "b again", "-C", repo.root,
               "--author", "Linus <linus@example.org>")[0] == 0
    assert repo.metadata(repo.head()[1]).author == mdiff.Author("Linus", "linus@example.org")


def test_every_command_exits_with_the_documented_status(tmp_path, capsys):
    """0 ok; 1 invalid input or a refused operation (or differences, with --exit-code); 2 usage, or a file
    that cannot be read at all."""
    from mdiff.repo import Repository

    save_checkpoint(tmp_path / "a.safetensors", {"w": np.zeros(3, np.float32)})
    save_checkpoint(tmp_path / "b.safetensors", {"w": np.ones(3, np.float32)})
    (tmp_path / "text.mdiff").write_text("not hdf5", encoding="utf-8")
    (tmp_path / "folder.mdiff").mkdir()
    repo = Repository.init(tmp_path / "r")
    a, b, r = tmp_path / "a.safetensors", tmp_path / "b.safetensors", repo.root
    d = tmp_path / "d.mdiff"
    table = [
        (["diff", a, b, "-o", d], 0),
        (["diff", a, b, "--exit-code"], 1),
        (["diff", a, a, "--exit-code"], 0),
        (["diff", a, tmp_path / "typo.safetensors"], 2),  # a missing file, not "no such revision"
        (["diff", a, b, "--meta", "no-equals-sign"], 2),
        (["dump", d], 0), (["dump", tmp_path / "text.mdiff"], 2), (["dump", tmp_path / "folder.mdiff"], 2),
        (["dump", tmp_path / "missing.mdiff"], 2),
        (["validate", d], 0), (["validate", tmp_path / "text.mdiff"], 2), (["validate", d, "--limit", "bogus=1"], 2),
        (["apply", a, d, "-o", tmp_path / "c.safetensors"], 0),
        (["apply", b, d, "-o", tmp_path / "c.safetensors"], 1),  # the wrong base: refused
        (["apply", a, tmp_path / "text.mdiff", "-o", tmp_path / "c.safetensors"], 2),
        (["commit", a, "-m", "a", "-C", r], 0),
        (["commit", a, "-m", "again", "-C", r], 1),  # nothing to commit
        (["status", b, "-C", r], 0), (["status", b, "-C", r, "--exit-code"], 1), (["status", a, "-C", r, "--exit-code"], 0),
        (["checkout", "nosuchbranch", "-o", tmp_path / "x.safetensors", "-C", r], 1),
        (["checkout", "HEAD", "-C", r], 2),  # -o missing
        (["log", "-C", r], 0), (["log", "-C", tmp_path], 1),  # not a repository
        (["branch", "-d", "../../commits", "-C", r], 1),
        (["frobnicate"], 2), (["log", "--no-such-option"], 2),
    ]
    for argv, status in table:
        code, out, err = run(capsys, *argv)
        assert code == status, (argv, code, out, err)
        assert "Traceback" not in err


def test_errors_are_json_under_json_and_usage_errors_say_what_to_do(tmp_path, capsys):
    code, out, err = run(capsys, "dump", tmp_path / "missing.mdiff", "--json")
    assert code == 2 and json.loads(out)["error"]["message"] == "No such file or directory"
    code, out, err = run(capsys, "validate", tmp_path / "x.mdiff", "--json", "--limit", "x")
    assert code == 2 and "--limit takes NAME=N" in json.loads(out)["error"]["message"]
    code, out, err = run(capsys, "diff")
    assert code == 2 and "usage: mdiff diff" in err and "required: OLD, NEW" in err


def test_a_closed_pipe_ends_the_output_quietly(tmp_path):
    from mdiff.repo import Repository

    repo = Repository.init(tmp_path / "r")
    for i in range(30):
        repo.commit({"w": np.full(3, i, np.float32)}, f"step {i}\n\n" + "body line\n" * 50, author="A", date=DATE)
    proc = subprocess.run(f"{sys.executable} -m mdiff log -C {repo.root} | head -1", shell=True, capture_output=True,
                          text=True)
    assert proc.stdout.startswith("*  commit") and proc.stderr == ""


def test_every_argument_of_every_command_has_help():
    import argparse

    from mdiff.cli.main import build_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    missing = [(name, action.option_strings or action.dest) for name, parser in commands.choices.items()
               for action in parser._actions if not isinstance(action, argparse._HelpAction) and not action.help]
    assert missing == []


def test_log_takes_n_and_stat_and_switch_takes_a_start(tmp_path, capsys):
    from mdiff.repo import Repository

    repo = Repository.init(tmp_path / "r")
    ids = [repo.commit({"w": np.arange(4, dtype=np.float32) + i}, f"step {i}", author="A", date=DATE) for i in range(3)]
    code, out, _ = run(capsys, "log", "--oneline", "-n", "2", "-C", repo.root)
    assert code == 0 and out.splitlines() == [f"*  {ids[2][:12]} (HEAD -> main) step 2", f"*  {ids[1][:12]} step 1"]
    code, out, _ = run(capsys, "log", "-n", "1", "--stat", "-C", repo.root)
    assert "w | dense" in out.replace("  ", " ") or "w | sparse" in out.replace("  ", " ")
    assert "1 parameter (1 " in out
    code, out, _ = run(capsys, "log", "-n", "1", "--stat", "--json", "-C", repo.root)
    assert json.loads(out)["stat"]["parameters"][0]["name"] == "w"
    assert run(capsys, "switch", "-c", "old", "HEAD~2", "-C", repo.root)[0] == 0
    assert repo.head() == ("old", ids[0])


def test_progress_is_reported_in_bytes(tmp_path):
    """The library reports (item, bytes done, bytes in all); the last call says all bytes are done."""
    from mdiff.repo import Repository

    state = {"a": np.zeros(1000, np.float32), "b": np.ones((10, 10), np.float64), "c": np.array(3, np.int8)}
    repo = Repository.init(tmp_path / "r")
    calls: list[tuple[str, int, int]] = []
    repo.commit(state, "s", author="A", date=DATE, progress=lambda *call: calls.append(call))
    assert [c[0] for c in calls] == ["a", "b", "c"] and [c[1] for c in calls] == [4000, 4800, 4801]
    assert {c[2] for c in calls} == {4801}
    calls.clear()
    repo.checkout("HEAD", tmp_path / "out.safetensors", progress=lambda *call: calls.append(call))
    assert calls[-1][1:] == (4801, 4801)
    calls.clear()
    repo.fsck(progress=lambda *call: calls.append(call))
    assert calls[-1][1] == calls[-1][2] == repo.commit_path(repo.head()[1]).stat().st_size


# ---------------------------------------------------------------- no tracebacks (issue 14.15)


@pytest.mark.parametrize("name,why", [
    ("a\0b", "contains NUL, which zip member names cannot"),
    ("x" * 70_000, "is longer than a zip member name can be"),
], ids=["NUL", "over 64 KiB"])
def test_a_name_an_npz_cannot_hold_is_md703_not_a_traceback(capsys, tmp_path, name, why):
    """SPEC.md §10: a result the output format cannot hold. Before: a ValueError's traceback."""
    save_checkpoint(tmp_path / "base.safetensors", {"v": np.ones(2, np.float32)})
    mdiff.write(tmp_path / "d.mdiff", {name: mdiff.replace(np.ones(2, np.float32))}, mdiff.Commit("x", date=DATE))
    code, _, err = run(capsys, "apply", tmp_path / "base.safetensors", tmp_path / "d.mdiff", "-o", tmp_path / "out.npz")
    assert code == 1
    assert err.startswith("mdiff: error MD703: tensor name ") and why in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base.safetensors", "d.mdiff"]
    code, _, _ = run(capsys, "apply", tmp_path / "base.safetensors", tmp_path / "d.mdiff", "-o", tmp_path / "out.safetensors")
    assert code == 0  # safetensors can


def _with_file_size_limit(limit: int):
    def limited() -> None:
        import resource
        import signal

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write() fails with EFBIG instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return limited


@pytest.mark.parametrize("command", ["commit", "diff", "apply-safetensors", "apply-npz"])
def test_a_file_size_limit_is_reported_as_the_operating_system_s_error(tmp_path, command):
    """`ulimit -f`: the write fails with EFBIG. Before, on commit and diff, closing the half-written HDF5
    file raised h5py's RuntimeError ("Can't decrement id ref count") over the real error: a traceback."""
    rng = np.random.default_rng(0)
    old = {"w": rng.standard_normal(1 << 19).astype(np.float32)}
    save_checkpoint(tmp_path / "old.safetensors", old)
    save_checkpoint(tmp_path / "new.safetensors", {"w": rng.standard_normal(1 << 19).astype(np.float32)})
    mdiff.write(tmp_path / "d.mdiff", mdiff.diff(old, {"w": old["w"] + 1}), mdiff.Commit("d", date=DATE))
    if command == "commit":
        mdiff.Repository.init(tmp_path)
    argv = {
        "commit": ["commit", "new.safetensors", "-m", "x", "--author", "A <a@example.org>", "--date", DATE],
        "diff": ["diff", "old.safetensors", "new.safetensors", "-o", "out.mdiff", "--date", DATE,
                 "--author", "A <a@example.org>"],
        "apply-safetensors": ["apply", "old.safetensors", "d.mdiff", "-o", "out.safetensors"],
        "apply-npz": ["apply", "old.safetensors", "d.mdiff", "-o", "out.npz"],
    }[command]
    before = sorted(p.name for p in tmp_path.iterdir())
    child = subprocess.run([sys.executable, "-m", "mdiff", *argv], cwd=tmp_path, capture_output=True, text=True,
                           preexec_fn=_with_file_size_limit(1 << 20), timeout=120)
    assert child.returncode == 2, child.stderr
    assert "Traceback" not in child.stderr
    assert child.stderr.startswith("mdiff: error: ") and "File too large" in child.stderr, child.stderr
    assert ".tmp" not in child.stderr and "/proc/" not in child.stderr  # no name mdiff made for itself
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    if command == "commit":
        assert os.listdir(tmp_path / ".mdiff/commits") == []


def test_the_command_line_starts_without_the_heavy_libraries():
    """`mdiff --help`, `--version` and argument errors need none of h5py, numpy or onnx (0.3 s of start-up):
    each command imports what it uses when it runs."""
    code = ("import sys, mdiff.cli.main; "
            "print(sorted(m for m in ('h5py', 'numpy', 'onnx', 'onnxruntime', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ---------------------------------------------------------------- issue 27: one unit, singulars, what a file is not
@pytest.mark.parametrize("n,said", [(0, "0 B"), (999, "999 B"), (1000, "1.0 kB"), (1499, "1.5 kB"), (999_949, "999.9 kB"),
                                    (999_950, "1.0 MB"), (473_900_000, "473.9 MB"), (452 * 2**20, "474.0 MB"),
                                    (3_200_000_000, "3.2 GB"), (5 * 10**12, "5.0 TB")])
def test_sizes_are_decimal_everywhere(n, said):
    from mdiff.cli.output import format_size as cli_size
    from mdiff.words import format_size

    assert format_size(n) == cli_size(n) == said


def test_commit_show_and_diff_say_one_file_s_size_in_one_unit(capsys, tmp_path, monkeypatch):
    """Before: commit said 473.9 MB where diff said 452.0 MiB of one file."""
    from mdiff.words import format_size

    monkeypatch.setenv("MDIFF_AUTHOR", "Ada <ada@example.org>")
    rng = np.random.default_rng(3)
    save_checkpoint(tmp_path / "a.safetensors", {"w": rng.standard_normal(300_000).astype(np.float32)})
    repo = mdiff.Repository.init(tmp_path / "r")
    code, out, _ = run(capsys, "commit", tmp_path / "a.safetensors", "-m", "a", "-C", repo.root)
    size = os.path.getsize(repo.commit_path(repo.head()[1]))
    assert code == 0 and f"; {format_size(size)} stored for 1.2 MB of weights" in out
    code, out, _ = run(capsys, "show", "-C", repo.root)
    assert f"(mdiff 1.3, {format_size(size)})" in out
    save_checkpoint(tmp_path / "b.safetensors", {"w": rng.standard_normal(300_000).astype(np.float32)})
    code, out, _ = run(capsys, "diff", tmp_path / "a.safetensors", tmp_path / "b.safetensors", "-o", tmp_path / "d.mdiff")
    assert out.rstrip().endswith(f"1 parameter changed (1 dense), {format_size(os.path.getsize(tmp_path / 'd.mdiff'))}")
    assert "iB" not in out


def test_one_of_a_thing_is_said_in_the_singular(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("MDIFF_AUTHOR", "Ada <ada@example.org>")
    save_checkpoint(tmp_path / "a.safetensors", {"w": np.ones(4, np.float32), "b": np.zeros(2, np.int8)})
    save_checkpoint(tmp_path / "b.safetensors", {"w": np.ones(4, np.float32) * 2, "b": np.zeros(2, np.int8)})
    code, out, _ = run(capsys, "diff", tmp_path / "a.safetensors", tmp_path / "b.safetensors")
    assert out.splitlines()[-1] == f"1 parameter differs between {tmp_path / 'a.safetensors'} and {tmp_path / 'b.safetensors'}"
    (tmp_path / "x.mdiff").write_bytes(b"not hdf5")
    code, out, _ = run(capsys, "validate", tmp_path / "x.mdiff")
    assert out.splitlines()[-1].endswith("INVALID (1 error, 0 warnings)")
    repo = mdiff.Repository.init(tmp_path / "r")
    repo.commit({"w": np.ones(4, np.float32)}, "one")
    code, out, _ = run(capsys, "fsck", "-C", repo.root)
    assert out.splitlines()[-1] == "1 commit checked: sound"
    code, out, _ = run(capsys, "status", tmp_path / "b.safetensors", "-C", repo.root)
    assert out.splitlines()[-1] == "2 parameters differ"


def test_a_text_file_given_as_a_checkpoint_says_it_is_not_one(capsys, tmp_path):
    (tmp_path / "x.safetensors").write_text("hello world\n", encoding="utf-8")
    repo = mdiff.Repository.init(tmp_path / "r")
    code, _, err = run(capsys, "commit", tmp_path / "x.safetensors", "-m", "x", "-C", repo.root)
    assert code == 1 and err.startswith("mdiff: error MD701: x.safetensors is not a safetensors file (")
