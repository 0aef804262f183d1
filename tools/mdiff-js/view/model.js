// What the page shows, computed from mdiff-js's validation of a file and from the server's index: no DOM
// here (tests/test_view.py checks the page; this module runs in Node too).

const SUFFIXES = ["B", "kB", "MB", "GB", "TB"];

// Sizes as mdiff says them (mdiff/words.py): decimal units.
export function formatBytes(n) {
  if (n === null || n === undefined) return "–";
  let v = Number(n);
  let i = 0;
  while (v >= 1000 && i < SUFFIXES.length - 1) {
    v /= 1000;
    i++;
  }
  return i === 0 ? `${v} B` : `${v.toFixed(v >= 100 ? 0 : v >= 10 ? 1 : 2)} ${SUFFIXES[i]}`;
}

export function formatChange(x) {
  if (x === null || x === undefined) return "–";
  if (x === 0) return "0";
  return Number(x).toExponential(2);
}

// JSON with BigInt (mdiff-js's strict parser keeps large integers exact)
export function toJson(value, space) {
  return JSON.stringify(value, (k, x) => (typeof x === "bigint" ? x.toString() : x), space);
}

function numel(shape) {
  return shape.reduce((a, b) => a * Number(b), 1);
}

// Stored bytes of every parameter group: the sizes of its datasets' chunks as the file holds them
// (compressed), or a contiguous or compact dataset's bytes.
function storedBytes(v) {
  const byGroup = new Map();
  for (const [path, info] of v.dsInfo) {
    if (!info || !info.meta) continue;
    const group = path.slice(0, path.lastIndexOf("/"));
    let bytes;
    if (info.chunked) bytes = info.chunked.chunks.reduce((s, c) => s + Number(c.size), 0);
    else bytes = numel(info.meta.shape || []) * info.meta.size;
    byGroup.set(group, (byGroup.get(group) || 0) + bytes);
  }
  return byGroup;
}

// A Validation (src/validate.js, after run) as the page shows it.
export function summarize(v, size) {
  const stored = storedBytes(v);
  const params = v.params.map((p) => {
    const u = p.update || {};
    const stats = u.stats || {};
    return {
      name: p.name,
      type: u.type ?? null,
      dtype: u.dtype ?? null,
      shape: Array.isArray(u.shape) ? u.shape.map(Number) : null,
      stored: stored.get(p.path) ?? 0,
      relChange: typeof stats.rel_change === "number" ? stats.rel_change : null,
      changed: stats.changed === undefined ? null : Number(stats.changed),
      ok: p.ok,
    };
  });
  const version = v.version ? `${v.version.major}.${v.version.minor}` : null;
  return {
    valid: v.errors.length === 0,
    version,
    commit: v.commit && typeof v.commit === "object" ? v.commit : null,
    findings: v.findings.map((f) => ({ code: f.code, severity: f.severity, path: f.path, section: f.section, message: f.message })),
    params,
    files: v.files.map((f) => f.name),
    layout: !!v.layout,
    size,
  };
}

// The layer and module kind of a parameter name: `encoder.layer.3.attention.self.query.weight` is layer
// `encoder.layer.3` (index 3), kind `attention.self.query.weight`; names without a numbered layer, null.
const LAYERED = /^(.*?)((?:^|\.)(?:layers?|h|blocks?|encoder_layers?|decoder_layers?))\.(\d+)\.(.+)$/;

export function layerOf(name) {
  const m = LAYERED.exec(name);
  if (!m) return null;
  const stack = `${m[1]}${m[2]}`.replace(/^\./, "");
  return { stack, index: Number(m[3]), layer: `${stack}.${m[3]}`, kind: m[4] };
}

// The heat map's grid: rows (layers, by stack then index), columns (kinds, sorted: attention.output…,
// attention.self…, intermediate…, output…), cells (row|column -> {name, value}), and the parameters outside
// any numbered layer.
export function heatmap(params) {
  const rows = new Map();
  const kinds = [];
  const seen = new Set();
  const cells = new Map();
  const outside = [];
  for (const p of params) {
    const at = layerOf(p.name);
    if (!at) {
      outside.push(p);
      continue;
    }
    rows.set(at.layer, at);
    if (!seen.has(at.kind)) {
      seen.add(at.kind);
      kinds.push(at.kind);
    }
    cells.set(`${at.layer}|${at.kind}`, { name: p.name, value: p.relChange, type: p.type });
  }
  kinds.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  const layers = [...rows.values()].sort((a, b) => (a.stack < b.stack ? -1 : a.stack > b.stack ? 1 : a.index - b.index)).map((r) => r.layer);
  const values = [...cells.values()].map((c) => c.value).filter((x) => typeof x === "number" && x > 0 && Number.isFinite(x));
  const min = values.length ? Math.min(...values) : null;
  const max = values.length ? Math.max(...values) : null;
  return { layers, kinds, cells, outside, min, max };
}

// A colour for log10(value) between log10(min) and log10(max): a perceptual ramp (viridis's end points and
// three stops between), so that equal ratios look equally far apart.
const RAMP = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];

export function colourOf(value, min, max) {
  if (!(value > 0) || min === null) return null;
  const lo = Math.log10(min);
  const hi = Math.log10(max);
  const t = hi > lo ? Math.min(1, Math.max(0, (Math.log10(value) - lo) / (hi - lo))) : 1;
  const x = t * (RAMP.length - 1);
  const i = Math.min(RAMP.length - 2, Math.floor(x));
  const f = x - i;
  const c = RAMP[i].map((a, k) => Math.round(a + (RAMP[i + 1][k] - a) * f));
  return `rgb(${c[0]}, ${c[1]}, ${c[2]})`;
}

export const COLUMNS = [
  { key: "name", label: "parameter" },
  { key: "type", label: "update" },
  { key: "dtype", label: "dtype" },
  { key: "shape", label: "shape" },
  { key: "stored", label: "stored bytes" },
  { key: "relChange", label: "‖Δ‖/‖W‖" },
];

function sortKey(row, key) {
  const x = row[key];
  if (key === "shape") return x ? numel(x) : -1;
  return x;
}

// Rows whose name, update type or dtype contains `text` (case-insensitive), sorted by `key` (missing values last).
export function tableRows(params, { filter = "", key = "name", descending = false } = {}) {
  const f = filter.trim().toLowerCase();
  const rows = f ? params.filter((p) => [p.name, p.type, p.dtype].some((s) => s && s.toLowerCase().includes(f))) : params.slice();
  const sign = descending ? -1 : 1;
  rows.sort((a, b) => {
    const x = sortKey(a, key);
    const y = sortKey(b, key);
    if (x === y) return a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
    if (x === null || x === undefined) return 1;
    if (y === null || y === undefined) return -1;
    return (x < y ? -1 : 1) * sign;
  });
  return rows;
}

// Two commits side by side: every parameter either one changes, by name.
export function compareRows(a, b) {
  const left = new Map(a.params.map((p) => [p.name, p]));
  const right = new Map(b.params.map((p) => [p.name, p]));
  const names = [...new Set([...left.keys(), ...right.keys()])].sort();
  return names.map((name) => ({ name, a: left.get(name) || null, b: right.get(name) || null }));
}

// The history graph's lanes (as `git log --graph` draws them): commits in the index's order (children before
// parents); each gets a column, and each edge the column it runs down.
export function graphLayout(commits) {
  const lanes = []; // lane -> the commit id it leads to
  const rowOf = new Map(commits.map((c, i) => [c.id, i]));
  const nodes = [];
  for (const c of commits) {
    let col = lanes.indexOf(c.id);
    if (col < 0) {
      col = lanes.indexOf(null);
      if (col < 0) col = lanes.push(null) - 1;
    }
    for (let i = 0; i < lanes.length; i++) if (lanes[i] === c.id && i !== col) lanes[i] = null; // lanes that join here
    const parents = (c.parents || []).filter((p) => rowOf.has(p));
    const edges = [];
    lanes[col] = parents.length ? parents[0] : null;
    if (parents.length) edges.push({ parent: parents[0], lane: col });
    for (const p of parents.slice(1)) {
      let lane = lanes.indexOf(p);
      if (lane < 0) {
        lane = lanes.indexOf(null);
        if (lane < 0) lane = lanes.push(null) - 1;
        lanes[lane] = p;
      }
      edges.push({ parent: p, lane });
    }
    nodes.push({ id: c.id, row: nodes.length, col, edges });
  }
  const width = Math.max(1, ...nodes.map((n) => Math.max(n.col, ...n.edges.map((e) => e.lane)) + 1));
  return { nodes, rowOf, width };
}
