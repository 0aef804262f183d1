// The page: a commit (or a dropped file) read with mdiff-js, a repository's history, two commits compared.
// No framework: the DOM is built with createElement and textContent only (nothing of a file is ever parsed as HTML).
import { inspect } from "./reader.js";
import { COLUMNS, colourOf, compareRows, formatBytes, formatChange, graphLayout, heatmap, tableRows, toJson } from "./model.js";

const PAGE_ROWS = 100;
const SVG = "http://www.w3.org/2000/svg";
const state = { index: { kind: "none" }, summaries: new Map(), selected: null, compare: [], table: null };
// what tests and people at the console can reach
const api = { ready: false, rendered: null, lastRender: null, error: null, listed: null, firstTable: null, validating: null, events: [] };
window.mdiffView = api;

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, String(v));
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) node.append(c instanceof Node ? c : String(c));
  return node;
}

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) node.setAttribute(k, String(v));
  for (const c of children.flat()) if (c !== null && c !== undefined) node.append(c instanceof Node ? c : String(c));
  return node;
}

function status(text) {
  document.getElementById("status").textContent = text;
}

const grouped = (n) => Number(n).toLocaleString("en-US");
const short = (id) => (id && /^[0-9a-f]{64}$/.test(id) ? id.slice(0, 12) : id);

// ------------------------------------------------------------------ reading a commit
// A commit's summary: its bytes (fetched, or dropped) read and validated in the worker (reader.js). The
// table and heat map are drawn from the listing the worker sends first; findings when validation ends.
function summaryOf(entry, onListing = null) {
  if (state.summaries.has(entry.id)) return state.summaries.get(entry.id);
  const repository = state.index.kind === "repository";
  const pending = (async () => {
    let bytes = entry.bytes;
    if (!bytes) {
      const response = await fetch(entry.blob);
      if (!response.ok) throw new Error(`the server answered ${response.status} for ${entry.blob}`);
      bytes = new Uint8Array(await response.arrayBuffer());
    }
    const format = repository ? state.index.format : null;
    const summary = await inspect(bytes, { format: format === 1 || format === 2 ? format : null, onListing });
    if (repository && summary.id !== entry.id) {
      summary.valid = false;
      const message = summary.id === undefined ? "the repository's format is unreadable: the commit's id cannot be checked"
        : `the commit file's id (repository format ${format}, §4.3) is ${summary.id}, not its name`;
      summary.findings.unshift({ code: "MD800", severity: "error", path: "/", section: "13.2", message });
    }
    return summary;
  })();
  if (!entry.bytes) state.summaries.set(entry.id, pending);
  pending.catch(() => state.summaries.delete(entry.id));
  return pending;
}

// What the page shows of a commit before its validation ends: the listed parameters, the index's metadata.
function listedSummary(params, entry) {
  const known = ["message", "author", "date", "parents", "writer", "meta", "state_sha256"].filter((k) => entry[k] !== undefined);
  return { valid: null, version: null, commit: known.length ? Object.fromEntries(known.map((k) => [k, entry[k]])) : null,
    findings: [], params, files: [], layout: false, size: entry.stored_bytes };
}

function event(name, detail = {}) {
  api.events.push({ event: name, ...detail });
}

async function openEntry(entry) {
  const started = performance.now();
  state.selected = entry.id;
  state.compare = [];
  markSelection();
  const shown = entry.bytes ? entry.id : short(entry.id);
  status(`reading ${shown}…`);
  const target = document.getElementById("commit");
  api.validating = entry.id;
  const onListing = (params) => {
    if (state.selected !== entry.id || !params) return;
    renderCommit(target, listedSummary(params, entry), entry, true);
    api.firstTable = { id: entry.id, ms: performance.now() - started, parameters: params.length };
    api.listed = entry.id;
    event("table", { id: entry.id });
    status(`${grouped(params.length)} parameters listed; validating…`);
  };
  try {
    const summary = await summaryOf(entry, onListing);
    if (state.selected !== entry.id) return;
    api.validating = null;
    event("validated", { id: entry.id });
    renderCommit(target, summary, entry, false);
    api.lastRender = { id: entry.id, ms: performance.now() - started, parameters: summary.params.length };
    api.rendered = entry.id;
    status(`${summary.params.length} parameters, ${summary.valid ? "valid" : "invalid"} (read in ${Math.round(api.lastRender.ms)} ms)`);
  } catch (e) {
    if (state.selected !== entry.id) return;
    api.validating = null;
    showError(target, e);
  }
}

async function openBytes(name, bytes) {
  const entry = { id: name, bytes, stored_bytes: bytes.length };
  state.index = { kind: "file", name, commits: [entry], refs: {} };
  document.getElementById("history").hidden = true;
  document.getElementById("source").textContent = name;
  await openEntry(entry);
}

function showError(target, e) {
  const code = e && /^MD\d{3}$/.test(e.code || "") ? e.code : null;
  api.error = { code, message: String((e && e.message) || e) };
  target.replaceChildren(el("div", { class: "error-box", id: "error" }, code ? el("span", { class: "code" }, code) : null, " ", `the file cannot be shown: ${api.error.message}`));
  status("error");
  api.rendered = "error";
}

// ------------------------------------------------------------------ one commit
// `pending`: the listing, drawn while the worker validates (a "validating…" line instead of the verdict and the
// findings); the summary that follows is drawn over it, the table keeping its filter, sort and page.
function renderCommit(target, s, entry, pending = false) {
  document.getElementById("drop").hidden = true;
  const c = s.commit || {};
  const isFile = state.index.kind !== "repository";
  const title = isFile ? state.index.name : `commit ${entry.id}`;
  const meta = el("dl", { class: "meta", id: "commit-meta" });
  const row = (label, value, id) => {
    meta.append(el("dt", {}, label), el("dd", id ? { "data-field": id } : {}, value));
  };
  const verdict = pending ? el("span", { class: "validating" }, el("span", { class: "spinner" }), "validating…")
    : el("span", { class: s.valid ? "ok" : "bad" }, s.valid ? "valid" : `invalid: ${s.findings.filter((f) => f.severity === "error").length} errors`);
  row("verdict", verdict, "verdict");
  if (typeof c.message === "string") row("message", c.message, "message");
  if (c.author && typeof c.author === "object") row("author", `${c.author.name ?? ""}${c.author.email ? ` <${c.author.email}>` : ""}`, "author");
  if (c.date !== undefined) row("date", String(c.date), "date");
  if (Array.isArray(c.parents)) {
    const known = new Map((state.index.commits || []).map((x) => [x.id, x]));
    const links = c.parents.map((p) => (known.has(p) ? el("a", { href: "#", onclick: (ev) => { ev.preventDefault(); openEntry(known.get(p)); } }, short(p)) : short(String(p))));
    row("parents", links.length ? links.flatMap((l, i) => (i ? [" ", l] : [l])) : "none (a root commit)", "parents");
  }
  row("format version", pending ? "…" : s.version ?? "unreadable", "version");
  if (c.writer && typeof c.writer === "object") row("writer", `${c.writer.name ?? ""} ${c.writer.version ?? ""}`.trim(), "writer");
  if (c.meta && typeof c.meta === "object") row("meta", Object.entries(c.meta).map(([k, v]) => `${k}=${typeof v === "string" ? v : toJson(v)}`).join("\n") || "none", "meta");
  if (c.state_sha256) row("state sha256", String(c.state_sha256), "state");
  row("stored", `${formatBytes(entry.stored_bytes ?? s.size)} (${grouped(entry.stored_bytes ?? s.size)} bytes)`, "stored");
  if (entry.checkpoint_bytes !== undefined && entry.checkpoint_bytes !== null) {
    row("full checkpoint", `${formatBytes(entry.checkpoint_bytes)} (${((100 * entry.stored_bytes) / entry.checkpoint_bytes).toFixed(1)}% stored)`, "checkpoint");
  }
  if (s.files.length || s.layout) row("files", `${s.files.length} ${s.files.length === 1 ? "file" : "files"}${s.layout ? ", a weights layout" : ""}`, "files");

  const findings = el("ul", { id: "findings" });
  for (const f of s.findings) {
    findings.append(el("li", { class: `finding ${f.severity}`, "data-code": f.code }, el("span", { class: "code" }, f.code), ` ${f.severity} at ${f.path}: ${f.message}`, f.section ? el("span", { class: "muted" }, ` (SPEC §${f.section})`) : null));
  }
  const previous = state.table && state.table.entry === entry.id ? state.table : null;
  const focused = previous && document.activeElement && document.activeElement.id === "filter";
  target.replaceChildren(
    el("h2", {}, title),
    meta,
    el("h3", {}, pending ? "Validation findings" : `Validation findings (${s.findings.length})`),
    pending ? el("p", { class: "muted validating", id: "validating" }, el("span", { class: "spinner" }), "validating… (the table lists the file's update attributes; stored bytes and findings follow)")
      : s.findings.length ? findings : el("p", { class: "muted", id: "findings" }, "none: every rule of SPEC.md §3–§8 holds"),
    el("h3", {}, "Relative change by layer"),
    renderHeatmap(s.params),
    el("h3", {}, `Parameters (${s.params.length})`),
    renderTable(s.params, entry.id, previous),
  );
  if (focused) document.getElementById("filter").focus();
}

// ------------------------------------------------------------------ the heat map
function renderHeatmap(params) {
  const h = heatmap(params);
  const box = el("div", { id: "heatmap" });
  if (!h.layers.length) {
    box.append(el("p", { class: "muted" }, "no parameter names with numbered layers (like encoder.layer.3.attention.self.query.weight)"));
    return box;
  }
  const cell = 20;
  const left = Math.max(...h.layers.map((l) => l.length)) * 6.6 + 10;
  const longest = Math.max(...h.kinds.map((k) => k.length)) * 6;
  const top = longest * 0.87 + 12; // labels at 60°: sin 60° of their length
  const barWidth = 280;
  const legend = h.min === null ? "" : `‖Δ‖/‖W‖, log scale: ${formatChange(h.min)} to ${formatChange(h.max)}; grey: unchanged; outlined: not recorded`;
  const width = Math.max(left + h.kinds.length * cell + longest * 0.5 + 10, left + barWidth + 30, left + legend.length * 6.4);
  const legendY = top + h.layers.length * cell + 30;
  const image = svg("svg", { width, height: legendY + 34, role: "img", "aria-label": "relative change per layer and module kind, log scale" });
  h.kinds.forEach((k, j) => {
    const x = left + j * cell + cell / 2 + 3;
    image.append(svg("text", { x, y: top - 4, transform: `rotate(-60 ${x} ${top - 4})`, "data-kind": k }, k));
  });
  h.layers.forEach((layer, i) => {
    const y = top + i * cell;
    image.append(svg("text", { x: left - 6, y: y + cell - 4, "text-anchor": "end", "data-layer": layer }, layer));
    h.kinds.forEach((k, j) => {
      const c = h.cells.get(`${layer}|${k}`);
      if (!c) return;
      const fill = colourOf(c.value, h.min, h.max) || (c.value === 0 ? "#d8d8d8" : "#ffffff");
      image.append(svg("rect", { x: left + j * cell, y, width: cell - 1, height: cell - 1, fill, stroke: c.value === null ? "#bbb" : "none",
        class: "cell", "data-name": c.name, "data-layer": layer, "data-kind": k, "data-value": c.value === null ? "" : c.value },
      svg("title", {}, `${c.name}: ${c.value === null ? `${c.type}, no relative change recorded` : `‖Δ‖/‖W‖ = ${formatChange(c.value)}`}`)));
    });
  });
  if (h.min !== null) {
    const lo = Math.floor(Math.log10(h.min));
    const hi = Math.ceil(Math.log10(h.max));
    const grad = svg("linearGradient", { id: "ramp" });
    for (let t = 0; t <= 10; t++) grad.append(svg("stop", { offset: `${t * 10}%`, "stop-color": colourOf(10 ** (Math.log10(h.min) + (t / 10) * (Math.log10(h.max) - Math.log10(h.min))), h.min, h.max) }));
    image.append(svg("defs", {}, grad), svg("rect", { x: left, y: legendY, width: barWidth, height: 10, fill: "url(#ramp)" }));
    const span = Math.log10(h.max) - Math.log10(h.min) || 1;
    for (let e = lo; e <= hi; e++) {
      const x = left + ((e - Math.log10(h.min)) / span) * barWidth;
      if (x < left - 0.5 || x > left + barWidth + 0.5) continue;
      image.append(svg("line", { x1: x, x2: x, y1: legendY + 10, y2: legendY + 14, stroke: "#333" }), svg("text", { x, y: legendY + 25, "text-anchor": "middle", class: "tick" }, `1e${e}`));
    }
    image.append(svg("text", { x: left, y: legendY - 6, id: "legend" }, legend));
  }
  box.append(image);
  if (h.outside.length) box.append(el("p", { class: "muted" }, `${h.outside.length} parameters outside numbered layers (embeddings, heads, …): in the table`));
  return box;
}

// ------------------------------------------------------------------ the table (paged: 100 rows at a time)
function renderTable(params, entryId, previous = null) {
  const t = { params, entry: entryId, filter: previous ? previous.filter : "", key: previous ? previous.key : "name",
    descending: previous ? previous.descending : false, page: previous ? previous.page : 0 };
  state.table = t;
  const box = el("div", { id: "parameters" });
  const filter = el("input", { type: "search", id: "filter", placeholder: "filter by name, update type or dtype", size: 40 });
  filter.value = t.filter;
  const info = el("span", { class: "muted", id: "page-info" });
  const prev = el("button", { id: "prev" }, "‹ previous");
  const next = el("button", { id: "next" }, "next ›");
  const body = el("tbody");
  const heads = COLUMNS.map((col) => el("th", { class: ["stored", "relChange"].includes(col.key) ? "num" : null }, el("button", { "data-sort": col.key, onclick: () => {
    t.descending = t.key === col.key ? !t.descending : col.key === "stored" || col.key === "relChange";
    t.key = col.key;
    t.page = 0;
    draw();
  } }, col.label)));
  const table = el("table", { id: "param-table" }, el("thead", {}, el("tr", {}, heads)), body);
  let rows = [];
  function draw() {
    rows = tableRows(t.params, t);
    const pages = Math.max(1, Math.ceil(rows.length / PAGE_ROWS));
    t.page = Math.min(t.page, pages - 1);
    const shown = rows.slice(t.page * PAGE_ROWS, (t.page + 1) * PAGE_ROWS);
    body.replaceChildren(...shown.map((p) => el("tr", { "data-name": p.name },
      el("td", { class: "name" }, p.name),
      el("td", { class: "type" }, p.type ?? "?"),
      el("td", { class: "dtype" }, p.dtype ?? "?"),
      el("td", { class: "shape" }, p.shape ? `[${p.shape.join(", ")}]` : "?"),
      el("td", { class: "num stored", "data-value": p.stored ?? "" }, p.stored === null ? "…" : grouped(p.stored)),
      el("td", { class: "num rel", "data-value": p.relChange ?? "" }, formatChange(p.relChange)))));
    info.textContent = rows.length ? `rows ${grouped(t.page * PAGE_ROWS + 1)}–${grouped(t.page * PAGE_ROWS + shown.length)} of ${grouped(rows.length)}` : "no parameter matches";
    prev.disabled = t.page === 0;
    next.disabled = t.page >= pages - 1;
    for (const b of table.querySelectorAll("th button")) b.textContent = COLUMNS.find((c) => c.key === b.dataset.sort).label + (b.dataset.sort === t.key ? (t.descending ? " ▼" : " ▲") : "");
    event("draw", { id: entryId, filter: t.filter, rows: rows.length, validating: api.validating === entryId });
  }
  filter.addEventListener("input", () => {
    t.filter = filter.value;
    t.page = 0;
    draw();
  });
  prev.addEventListener("click", () => { t.page -= 1; draw(); });
  next.addEventListener("click", () => { t.page += 1; draw(); });
  draw();
  box.append(el("div", { class: "pager" }, filter, prev, next, info), table);
  return box;
}

// ------------------------------------------------------------------ the history graph
function renderHistory() {
  const index = state.index;
  const commits = index.commits;
  const section = document.getElementById("history");
  section.hidden = false;
  const labels = new Map();
  const add = (id, text, kind) => { if (!labels.has(id)) labels.set(id, []); labels.get(id).push([text, kind]); };
  for (const [name, id] of Object.entries(index.refs.branches || {})) add(id, index.refs.head_branch === name ? `HEAD → ${name}` : name, "branch");
  for (const [name, id] of Object.entries(index.refs.tags || {})) add(id, `tag: ${name}`, "tag");
  if (index.refs.head && !index.refs.head_branch) add(index.refs.head, "HEAD (detached)", "branch");
  const g = graphLayout(commits);
  const rowH = 30;
  const lane = 16;
  const graphWidth = g.width * lane + 8;
  const x = (col) => 8 + col * lane;
  const y = (row) => row * rowH + rowH / 2;
  const lines = svg("svg", { width: graphWidth, height: commits.length * rowH, class: "lanes" });
  for (const n of g.nodes) {
    for (const e of n.edges) {
      const p = g.rowOf.get(e.parent);
      const d = `M ${x(n.col)} ${y(n.row)} C ${x(n.col)} ${y(n.row) + rowH / 2}, ${x(e.lane)} ${y(n.row) + rowH / 2}, ${x(e.lane)} ${y(n.row) + rowH} L ${x(e.lane)} ${y(p) - rowH / 2} C ${x(e.lane)} ${y(p)}, ${x(g.nodes[p].col)} ${y(p)}, ${x(g.nodes[p].col)} ${y(p)}`;
      lines.append(svg("path", { d, fill: "none", stroke: `hsl(${(e.lane * 67) % 360} 55% 45%)`, "stroke-width": 2 }));
    }
  }
  for (const n of g.nodes) lines.append(svg("circle", { cx: x(n.col), cy: y(n.row), r: 5, fill: commits[n.row].parents && commits[n.row].parents.length > 1 ? "#fff" : `hsl(${(n.col * 67) % 360} 55% 45%)`, stroke: "#333" }));
  const list = el("div", { class: "rows", style: `margin-left:${graphWidth}px` });
  const maxFull = Math.max(1, ...commits.map((c) => Math.max(c.checkpoint_bytes || 0, c.stored_bytes || 0)));
  for (const c of commits) {
    const first = typeof c.message === "string" ? c.message.split("\n")[0] : c.error ? `unreadable: ${c.error.code}` : "";
    const box = el("input", { type: "checkbox", class: "compare", title: "compare", onclick: (ev) => { ev.stopPropagation(); toggleCompare(c.id, ev.target.checked); } });
    const bars = el("span", { class: "bars", title: `stored ${formatBytes(c.stored_bytes)}, full checkpoint ${formatBytes(c.checkpoint_bytes)}` },
      el("span", { style: `display:inline-block;height:6px;background:#3b528b;width:${Math.max(1, Math.round((60 * c.stored_bytes) / maxFull))}px` }),
      el("span", { style: `display:inline-block;height:6px;background:#cfd4e6;width:${Math.round((60 * Math.max(0, (c.checkpoint_bytes || 0) - c.stored_bytes)) / maxFull)}px` }));
    const sizes = el("span", { class: "muted sizes" }, ` ${formatBytes(c.stored_bytes)} / ${formatBytes(c.checkpoint_bytes)}`);
    const badges = (labels.get(c.id) || []).map(([text, kind]) => el("span", { class: `badge ${kind}`, style: `border:1px solid ${kind === "tag" ? "#b8860b" : "#3b528b"};border-radius:3px;padding:0 3px;margin-right:3px` }, text));
    list.append(el("div", { class: "graph-row", "data-id": c.id, style: `height:${rowH}px;display:flex;align-items:center;gap:6px;white-space:nowrap`, onclick: () => openEntry(c) },
      box, el("code", {}, short(c.id)), ...badges, el("span", { class: "message" }, first), bars, sizes));
  }
  const holder = el("div", { style: "position:relative" }, el("div", { style: "position:absolute;left:0;top:0" }, lines), list);
  document.getElementById("graph").replaceChildren(holder);
}

function markSelection() {
  for (const r of document.querySelectorAll(".graph-row")) r.classList.toggle("selected", r.dataset.id === state.selected);
}

function toggleCompare(id, on) {
  state.compare = state.compare.filter((x) => x !== id);
  if (on) state.compare.push(id);
  if (state.compare.length > 2) {
    const dropped = state.compare.shift();
    const box = document.querySelector(`.graph-row[data-id="${dropped}"] input.compare`);
    if (box) box.checked = false;
  }
  if (state.compare.length === 2) openCompare(...state.compare);
}

// ------------------------------------------------------------------ two commits
async function openCompare(idA, idB) {
  const byId = new Map(state.index.commits.map((c) => [c.id, c]));
  const target = document.getElementById("commit");
  status(`comparing ${short(idA)} and ${short(idB)}…`);
  try {
    const [a, b] = await Promise.all([summaryOf(byId.get(idA)), summaryOf(byId.get(idB))]);
    const rows = compareRows(a, b);
    const cells = (p) => (p ? [el("td", {}, p.type ?? "?"), el("td", { class: "num", "data-value": p.stored }, grouped(p.stored)), el("td", { class: "num", "data-value": p.relChange ?? "" }, formatChange(p.relChange))]
      : [el("td", { class: "muted" }, "—"), el("td"), el("td")]);
    const body = el("tbody");
    let page = 0;
    const info = el("span", { class: "muted" });
    const prev = el("button", {}, "‹ previous");
    const next = el("button", {}, "next ›");
    const draw = () => {
      const shown = rows.slice(page * PAGE_ROWS, (page + 1) * PAGE_ROWS);
      body.replaceChildren(...shown.map((r) => el("tr", { "data-name": r.name }, el("td", {}, r.name), ...cells(r.a), ...cells(r.b))));
      info.textContent = `rows ${page * PAGE_ROWS + 1}–${page * PAGE_ROWS + shown.length} of ${rows.length}`;
      prev.disabled = page === 0;
      next.disabled = (page + 1) * PAGE_ROWS >= rows.length;
    };
    prev.addEventListener("click", () => { page -= 1; draw(); });
    next.addEventListener("click", () => { page += 1; draw(); });
    draw();
    const head = el("thead", {}, el("tr", {}, el("th"), el("th", { colspan: 3 }, short(idA)), el("th", { colspan: 3 }, short(idB))),
      el("tr", {}, ["parameter", "update", "stored bytes", "‖Δ‖/‖W‖", "update", "stored bytes", "‖Δ‖/‖W‖"].map((h) => el("th", {}, h))));
    target.replaceChildren(el("h2", {}, `${short(idA)} and ${short(idB)}`),
      el("p", { class: "muted" }, `${rows.length} parameters changed in either (—: not changed by that commit)`),
      el("div", { class: "pager" }, prev, next, info), el("table", { id: "compare-table" }, head, body));
    api.rendered = `compare:${idA}:${idB}`;
    status(`compared: ${rows.length} parameters`);
  } catch (e) {
    showError(target, e);
  }
}

// ------------------------------------------------------------------ start
function setUpDrop() {
  const readFile = async (file) => openBytes(file.name, new Uint8Array(await file.arrayBuffer()));
  document.getElementById("picker").addEventListener("change", (ev) => { if (ev.target.files[0]) readFile(ev.target.files[0]); });
  const zone = document.body;
  zone.addEventListener("dragover", (ev) => { ev.preventDefault(); document.getElementById("drop").classList.add("over"); });
  zone.addEventListener("dragleave", () => document.getElementById("drop").classList.remove("over"));
  zone.addEventListener("drop", (ev) => {
    ev.preventDefault();
    document.getElementById("drop").classList.remove("over");
    const file = ev.dataTransfer.files[0];
    if (file) readFile(file);
  });
}

async function start() {
  setUpDrop();
  api.openBytes = openBytes;
  try {
    const response = await fetch(new URL("../api/index.json", location.href));
    if (response.ok) state.index = await response.json();
  } catch {
    /* a static copy of the page: no index */
  }
  const index = state.index;
  api.index = index;
  api.ready = true;
  if (index.kind === "none") {
    status("drop or pick a .mdiff file");
    return;
  }
  document.getElementById("source").textContent = index.name;
  if (index.kind === "repository") renderHistory();
  api.open = (id) => openEntry(index.commits.find((c) => c.id === id));
  const first = index.commits.find((c) => c.id === index.selected) || index.commits[0];
  if (first) await openEntry(first);
  else status("the repository has no commits");
}

start();
