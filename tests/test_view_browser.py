"""`mdiff view`'s page in a real headless Chromium (Debian's `chromium`, driven by Playwright's Python package
pointed at it: nothing downloads a browser): a corpus file, a small repository, hostile files, 10^4 parameters.

Skipped, with the reason, where chromium or playwright is missing; `.ci/run` (tools/test) installs both.
Screenshots go to $MDIFF_TEST_ARTEFACTS/view/ (default test-artefacts/view/, not committed)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import h5py
import numpy as np
import pytest

from mdiff.format.names import decode_name
from mdiff.repo.repository import Repository
from mdiff.view import site as view_site
from mdiff.view.server import ViewServer

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "conformance"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTEFACTS = Path(os.environ.get("MDIFF_TEST_ARTEFACTS", ROOT / "test-artefacts")) / "view"
DATE = "2026-01-01T00:00:00Z"

try:
    from playwright.sync_api import sync_playwright
except ImportError:  # pragma: no cover - the reason is given below
    sync_playwright = None

if os.environ.get("MDIFF_REQUIRE_BROWSER") == "1" and (CHROMIUM is None or sync_playwright is None):  # .ci/run sets it
    raise RuntimeError("MDIFF_REQUIRE_BROWSER=1 but chromium or playwright is missing: the browser tests would be skipped")
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium chromium-driver; .ci/run does)"),
    pytest.mark.skipif(sync_playwright is None, reason="playwright is not installed (pip install -c tools/constraints.txt playwright)"),
    pytest.mark.skipif(not (ROOT / "tools/mdiff-js/node_modules/h5wasm").is_dir(), reason="run `npm ci --prefix tools/mdiff-js`"),
]


@pytest.fixture(scope="module")
def browser() -> Iterator:
    with sync_playwright() as p:
        # --no-sandbox: CI runs as root, where Chromium's sandbox cannot start
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


class Page:
    """A tab on a served site, failing the test on any script error of the page."""

    def __init__(self, browser, site: view_site.Site, width: int = 1400):
        self.server = ViewServer(site.resources, site.redirects, token=secrets.token_urlsafe(24))  # as `mdiff view` does
        self.server.start()
        self.page = browser.new_page(viewport={"width": width, "height": 900})
        self.errors: list[str] = []
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def open(self, shows: bool = True) -> float:
        """Load the page; wait until it shows the file or commit served (else, until it is ready for a drop)."""
        started = time.perf_counter()
        self.page.goto(self.server.url)
        if shows:
            self.wait()
        else:
            self.page.wait_for_function("window.mdiffView && window.mdiffView.ready", timeout=60_000)
        return time.perf_counter() - started

    def wait(self, expect: str | None = None) -> None:
        test = "window.mdiffView && window.mdiffView.rendered" + (f" === {json.dumps(expect)}" if expect else "")
        self.page.wait_for_function(test, timeout=180_000)
        assert self.errors == []

    def js(self, expression: str):
        return self.page.evaluate(expression)

    def table(self, selector: str = "#param-table") -> list[list[str]]:
        return self.js(f"""[...document.querySelectorAll('{selector} tbody tr')].map(tr =>
            [...tr.children].map(td => td.dataset.value !== undefined ? td.dataset.value : td.textContent))""")

    def shot(self, name: str) -> Path:
        ARTEFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTEFACTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def close(self) -> None:
        self.page.close()
        self.server.stop()


def expected_rows(path: Path) -> list[list[str]]:
    """What the table must show for a valid file, from h5py and the updates' JSON: name, type, dtype, shape,
    stored bytes (each dataset's storage as the file holds it), recorded relative change."""
    rows = []
    with h5py.File(path, "r") as f:
        for link, group in f["parameters"].items():
            update = json.loads(group.attrs["update"])
            stored = sum(d.id.get_storage_size() for d in group.values() if isinstance(d, h5py.Dataset))
            rel = update.get("stats", {}).get("rel_change")
            rows.append([decode_name(link), update["type"], update["dtype"], f"[{', '.join(map(str, update['shape']))}]",
                         str(stored), "" if rel is None else rel])
    return sorted(rows, key=lambda r: r[0].encode())


def as_values(rows: list[list[str]]) -> list[list]:
    """The page's rows with the relative change as a number (JS and Python both print the shortest round trip)."""
    return [[*r[:5], float(r[5]) if r[5] != "" else ""] for r in rows]


# ---------------------------------------------------------------- a corpus file, from the wheel's copy of the page
def test_a_corpus_file_from_the_wheel_layout(browser, tmp_path):
    static = tmp_path / "static"
    view_site.copy_page(static)  # what setup.py puts in the wheel
    case = CORPUS / "valid" / "valid_every_type" / "diff.mdiff"
    page = Page(browser, view_site.file_site(case, root=static))
    try:
        page.open()
        rows = page.table()
        assert as_values(rows) == expected_rows(case)
        assert page.js("document.querySelector('[data-field=verdict]').textContent") == "valid"
        with h5py.File(case, "r") as f:
            version = f.attrs["format_version"]
        assert page.js("document.querySelector('[data-field=version]').textContent") == (version.decode() if isinstance(version, bytes) else version)
        assert page.js("document.querySelector('#findings').textContent").startswith("none")
        # sorted by stored bytes (largest first), then filtered
        page.page.click("th button[data-sort=stored]")
        stored = [int(r[4]) for r in page.table()]
        assert stored == sorted(stored, reverse=True)
        page.page.fill("#filter", "low_rank")
        assert [r[1] for r in page.table()] and {r[1] for r in page.table()} == {"low_rank"}
        page.shot("corpus-valid-file")
    finally:
        page.close()


# ---------------------------------------------------------------- a small repository
LAYERS = 3
KINDS = ("attention.self.query.weight", "attention.output.dense.weight", "intermediate.dense.weight", "output.LayerNorm.bias")
SIDE = "bert.encoder.layer.0.attention.self.query.weight"


def _small_repository(root: Path) -> Repository:
    rng = np.random.default_rng(5)
    names = [f"bert.encoder.layer.{i}.{k}" for i in range(LAYERS) for k in KINDS] + ["bert.embeddings.word_embeddings.weight", "classifier.bias"]
    state = {n: rng.standard_normal((8,) if n.endswith("bias") else (8, 8)).astype(np.float32) for n in names}
    # no isolated child: a forked one would hold Playwright's pipe to its driver open, and its exit would wait
    r = Repository.init(root, isolation=None)
    r.commit(state, "base", author="A", date=DATE)
    step = {n: (v + rng.standard_normal(v.shape).astype(np.float32) * np.float32(10.0 ** -(1 + i % 4))) if i % 5 else v
            for i, (n, v) in enumerate(state.items())}  # every fifth unchanged, the others by 1e-1 to 1e-4
    r.commit(step, "fine-tune", author="A", date=DATE)
    r.tag("v1")
    r.switch("side", create=True, start="HEAD~1")
    side = dict(state)
    side[SIDE] = side[SIDE] * np.float32(2)  # a parameter the fine-tune leaves as it is: the merge is clean
    r.commit(side, "head only", author="B", date=DATE)
    r.switch("main")
    assert r.merge("side", message="merge side", author="A", date=DATE).how == "merge"
    return r


def test_a_repository_graph_heat_map_table_and_comparison(browser, tmp_path):
    repo = _small_repository(tmp_path / "project")
    site = view_site.repository_site(repo)
    ids = [c["id"] for c in site.index["commits"]]
    page = Page(browser, site)
    try:
        page.open()
        head = repo.head()[1]
        assert page.js("window.mdiffView.rendered") == head == site.index["selected"]
        # the graph: every commit, in the index's order (site.graph_order: children first, the merge's first-parent
        # line, then its side, never by id), with its refs and sizes
        assert [c["message"] for c in site.index["commits"]] == ["merge side", "fine-tune", "head only", "base"]
        assert page.js("[...document.querySelectorAll('.graph-row')].map(r => r.dataset.id)") == ids
        assert page.js("[...document.querySelectorAll('.graph-row .message')].map(m => m.textContent)") == \
            ["merge side", "fine-tune", "head only", "base"]
        badges = page.js("[...document.querySelectorAll('.graph-row')].map(r => [...r.querySelectorAll('.badge')].map(b => b.textContent))")
        assert badges == [["HEAD → main"], ["tag: v1"], ["side"], []]  # the merge, its first parent line, then the side
        assert page.js("document.querySelectorAll('svg.lanes circle').length") == 4
        assert page.js("document.querySelectorAll('svg.lanes path').length") == 4  # 3 first-parent edges and the merge's
        # the fine-tune: its table and heat map, exactly as the file records them
        fine_tune, side_id = ids[1], ids[2]
        page.page.click(f".graph-row[data-id='{fine_tune}'] .message")
        page.wait(fine_tune)
        path = repo.dir / "commits" / f"{fine_tune}.mdiff"
        expected = expected_rows(path)
        assert as_values(page.table()) == expected
        cells = page.js("Object.fromEntries([...document.querySelectorAll('#heatmap rect.cell')].map(r => [r.dataset.name, r.dataset.value]))")
        layered = {r[0]: r[5] for r in expected if ".layer." in r[0]}
        assert {n: float(v) if v else "" for n, v in cells.items()} == layered and len(layered) == 9  # every fifth unchanged
        assert page.js("[...document.querySelectorAll('#heatmap text[data-layer]')].map(t => t.textContent)") == \
            [f"bert.encoder.layer.{i}" for i in range(LAYERS)]
        assert page.js("[...document.querySelectorAll('#heatmap text[data-kind]')].map(t => t.textContent)") == \
            sorted(KINDS)
        assert page.js("document.getElementById('legend').textContent").startswith("‖Δ‖/‖W‖, log scale: ")
        assert page.js("document.querySelector('[data-field=message]').textContent") == "fine-tune"
        assert page.js("document.querySelector('[data-field=parents]').textContent") == ids[3][:12]
        page.shot("repository-commit")
        # two commits compared: every parameter either changes
        page.page.check(f".graph-row[data-id='{fine_tune}'] input.compare")
        page.page.check(f".graph-row[data-id='{side_id}'] input.compare")
        page.wait(f"compare:{fine_tune}:{side_id}")
        compared = page.table("#compare-table")
        assert [r[0] for r in compared] == sorted({r[0] for r in expected} | {SIDE})
        side = next(r for r in compared if r[0] == SIDE)
        assert side[1] == "—" and side[4] == "dense"
        page.shot("repository-compare")
    finally:
        page.close()


def _codes_of_every_commit(page: Page, ids: list[str]) -> dict[str, list[str]]:
    shown = {}
    for cid in ids:
        page.js(f"window.mdiffView.open({json.dumps(cid)})")
        page.wait(cid)
        shown[cid] = page.js("[...document.querySelectorAll('#findings li')].map(li => li.dataset.code)")
    return shown


def test_commit_ids_are_checked_as_the_repository_format_says(browser, tmp_path):
    repos = {}
    for repository_format in (1, 2):
        r = Repository.init(tmp_path / f"format{repository_format}", isolation=None, repository_format=repository_format)
        r.commit({"w": np.arange(6, dtype=np.float32)}, "first", author="A", date=DATE)
        r.commit({"w": np.arange(6, dtype=np.float32) + 1}, "second", author="A", date=DATE)
        repos[repository_format] = r
        site = view_site.repository_site(r)
        assert site.index["format"] == repository_format
        ids = [c["id"] for c in site.index["commits"]]
        page = Page(browser, site)
        try:
            page.open()
            assert _codes_of_every_commit(page, ids) == {cid: [] for cid in ids}, repository_format
            assert page.js("document.querySelector('[data-field=verdict]').textContent") == "valid"
        finally:
            page.close()
    # a format-2 commit file holding another commit's bytes: MD800, naming the id those bytes have
    r = repos[2]
    second, first = [c["id"] for c in view_site.repository_site(r).index["commits"]]
    (r.dir / "commits" / f"{first}.mdiff").write_bytes((r.dir / "commits" / f"{second}.mdiff").read_bytes())
    page = Page(browser, view_site.repository_site(r))
    try:
        page.open()
        assert _codes_of_every_commit(page, [second, first]) == {second: [], first: ["MD800"]}
        assert page.js("document.querySelector('#findings li').textContent") == \
            f"MD800 error at /: the commit file's id (repository format 2, §4.3) is {second}, not its name (SPEC §13.2)"
        assert page.js("document.querySelector('[data-field=verdict]').textContent") == "invalid: 1 errors"
    finally:
        page.close()


# ---------------------------------------------------------------- hostile files show their codes
HOSTILE = ["hostile/MD100-not_hdf5", "hostile/MD100-truncated", "hostile/MD201-commit_nan", "hostile/MD302-link_not_utf8",
           "hostile/MD408-sparse_out_of_range", "hostile/MD410-replace_value_changed", "hostile/MD500-soft_link",
           "hostile/MD513-corrupt_object_header", "hostile/MD514-cycle", "hostile/MD304-file_path_dotdot",
           "hostile/MD421-function_not_onnx"]


def test_hostile_corpus_files_show_their_codes(browser):
    manifest = {c["files"]["diff"]: c for c in json.loads((CORPUS / "manifest.json").read_text())["cases"] if "diff" in c["files"]}
    page = Page(browser, view_site.page_site())
    try:
        page.open(shows=False)
        assert page.js("document.getElementById('status').textContent") == "drop or pick a .mdiff file"
        for case in HOSTILE:
            expect = manifest[f"{case}/diff.mdiff"]["expect"]
            page.js("window.mdiffView.rendered = null")
            page.page.set_input_files("#picker", str(CORPUS / case / "diff.mdiff"))
            page.wait()
            shown = page.js("[...document.querySelectorAll('#findings li')].map(li => [li.dataset.code, li.className])")
            assert sorted({code for code, kind in shown if "error" in kind}) == sorted(set(expect["codes"])), case
            assert sorted(code for code, kind in shown if "warning" in kind) == sorted(expect.get("warnings", [])), case
            assert page.js("document.querySelector('[data-field=verdict]').textContent").startswith("invalid: "), case
        page.shot("hostile-file")
    finally:
        page.close()


# ---------------------------------------------------------------- 10^4 parameters
def test_ten_thousand_parameters_table_first_and_the_page_answers_while_validating(browser, tmp_path):
    n = 10_000
    names = [f"model.layers.{i // 10}.mlp.p{i % 10}.weight" for i in range(n)]
    rng = np.random.default_rng(1)
    base = {name: rng.standard_normal(4).astype(np.float32) for name in names}
    repo = Repository.init(tmp_path / "many", isolation=None)
    repo.commit(base, "base", author="A", date=DATE)
    repo.commit({name: v * np.float32(1.5) for name, v in base.items()}, "every value", author="A", date=DATE)
    page = Page(browser, view_site.repository_site(repo))
    try:
        page.open(shows=False)
        page.page.wait_for_function("window.mdiffView.listed !== null", timeout=180_000)
        # the table is drawn from the listing while the worker validates: the page answers meanwhile
        assert page.js("window.mdiffView.validating") == page.js("window.mdiffView.listed")
        assert page.js("document.getElementById('validating').textContent").startswith("validating…")
        assert page.js("document.getElementById('page-info').textContent") == f"rows 1–100 of {n:,}"
        page.page.fill("#filter", "layers.999.")
        assert [r[0] for r in page.table()] == [f"model.layers.999.mlp.p{k}.weight" for k in range(10)]
        page.wait()
        events = page.js("window.mdiffView.events")
        kinds = [e["event"] for e in events]
        filtered = next(i for i, e in enumerate(events) if e["event"] == "draw" and e["filter"] == "layers.999.")
        assert kinds.index("table") < filtered < kinds.index("validated")  # counted by events, not by time
        assert events[filtered]["validating"] is True and events[filtered]["rows"] == 10
        first, done = page.js("window.mdiffView.firstTable"), page.js("window.mdiffView.lastRender")
        print(f"\n10^4 parameters: table after {first['ms']:.0f} ms, validation done after {done['ms']:.0f} ms (in the page, from opening)")
        assert first["parameters"] == done["parameters"] == n
        # the validated table keeps the filter; stored bytes filled in
        assert page.js("document.getElementById('page-info').textContent") == "rows 1–10 of 10"
        assert all(r[4].isdigit() and int(r[4]) > 0 for r in page.table())
        assert page.js("document.querySelector('#findings').textContent").startswith("none")
        page.page.fill("#filter", "")
        assert page.js("document.getElementById('page-info').textContent") == f"rows 1–100 of {n:,}"
        assert len(page.table()) == 100 and page.table()[0][0] == "model.layers.0.mlp.p0.weight"
        assert page.js("document.querySelectorAll('#heatmap rect.cell').length") == n
        page.page.click("#next")
        assert page.table()[0][0] == sorted(names)[100]
        page.shot("ten-thousand-parameters")
    finally:
        page.close()


# ---------------------------------------------------------------- the page opened from disk
def test_the_page_works_from_file_urls_with_a_picked_file(browser, tmp_path):
    static = tmp_path / "static"
    view_site.copy_page(static)  # what the wheel carries: the page's files alone, no server
    case = CORPUS / "valid" / "valid_every_type" / "diff.mdiff"
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto((static / "view" / "index.html").as_uri())
        page.wait_for_function("window.mdiffView && window.mdiffView.ready", timeout=60_000)
        assert page.evaluate("document.getElementById('status').textContent") == "drop or pick a .mdiff file"
        page.set_input_files("#picker", str(case))
        page.wait_for_function("window.mdiffView.rendered === 'diff.mdiff'", timeout=180_000)
        rows = page.evaluate("""[...document.querySelectorAll('#param-table tbody tr')].map(tr =>
            [...tr.children].map(td => td.dataset.value !== undefined ? td.dataset.value : td.textContent))""")
        assert as_values(rows) == expected_rows(case)
        assert page.evaluate("document.querySelector('[data-field=verdict]').textContent") == "valid"
        assert errors == []
    finally:
        page.close()


# ---------------------------------------------------------------- the shims, against Node's own modules
@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_the_browser_shims_agree_with_node():
    script = """
import zlib from "node:zlib"; import crypto from "node:crypto";
import { inflateSync } from "./view/shims/zlib.js"; import { createHash } from "./view/shims/crypto.js";
import { Buffer as B } from "./view/shims/buffer.js";
let seed = 7; const rnd = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
const out = { same: 0, refusedAlike: 0 };
for (let t = 0; t < 120; t++) {
  const n = Math.floor(rnd() * 70000); const b = Buffer.alloc(n);
  for (let i = 0; i < n; i++) b[i] = t % 3 === 0 ? rnd() * 256 : t % 3 === 1 ? (i % 7) * 3 : (rnd() < 0.9 ? 0 : rnd() * 256);
  const z = zlib.deflateSync(b, { level: t % 10, strategy: t % 4 === 3 ? zlib.constants.Z_RLE : 0 });
  if (Buffer.compare(Buffer.from(inflateSync(z, { maxOutputLength: n })), b) !== 0) throw new Error("inflate " + t);
  if (createHash("sha256").update(b).digest("hex") !== crypto.createHash("sha256").update(b).digest("hex")) throw new Error("sha " + t);
  out.same++;
  const bad = Buffer.from(z); if (bad.length > 8) { bad[Math.floor(rnd() * bad.length)] ^= 1 << Math.floor(rnd() * 8); }
  let a = null, c = null;
  try { a = zlib.inflateSync(bad, { maxOutputLength: n }); } catch { a = "refused"; }
  try { c = inflateSync(bad, { maxOutputLength: n }); } catch { c = "refused"; }
  if ((a === "refused") !== (c === "refused")) throw new Error("corrupt stream " + t + ": node " + (a === "refused") + ", shim " + (c === "refused"));
  if (a !== "refused" && Buffer.compare(Buffer.from(a), Buffer.from(c)) !== 0) throw new Error("corrupt stream output " + t);
  if (a === "refused") out.refusedAlike++;
  try { inflateSync(z, { maxOutputLength: Math.max(0, n - 1) }); if (n > 0) throw new Error("limit " + t); }
  catch (e) { if (n > 0 && e.code !== "ERR_BUFFER_TOO_LARGE") throw e; }
}
const x = B.from([1, 2, 3, 4, 5, 6, 7, 8]);
out.reads = [x.readUInt16LE(1), x.readUInt32LE(2), String(x.readBigUInt64LE(0)), x.subarray(2, 4) instanceof B,
             x.toString("hex"), B.from("héllo").toString("latin1").length];
console.log(JSON.stringify(out));
"""
    done = subprocess.run(["node", "--input-type=module", "-e", script], cwd=ROOT / "tools" / "mdiff-js", capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["same"] == 120 and result["reads"] == [770, 100992003, "578437695752307201", True, "0102030405060708", 6]
    print(f"\ncorrupted streams refused by both: {result['refusedAlike']} of 120")
