#!/usr/bin/env node
// mdiff-js: an independent validator and applier of mdiff files (SPEC.md), on h5wasm.
//
//   mdiff-js validate FILE... [--json] [--no-data] [--limit NAME=N ...]
//   mdiff-js apply BASE.safetensors DIFF.mdiff -o OUT.safetensors [--json] [--limit NAME=N ...]
//   mdiff-js apply-many BASE DIFF OUT [BASE DIFF OUT ...] [--json] [--limit NAME=N ...]
//   mdiff-js checkout REVISION -o OUT.safetensors [-C REPO_DIR] [--json] [--limit NAME=N ...]
//   mdiff-js merge-file OURS BASE THEIRS -o OUT [--strategy S] [--all] [--json]
//   mdiff-js features          (conformance features claimed: conformance/README.md)
//   mdiff-js rel-change-vectors FILE   (SPEC.md §11's stats.rel_change run on conformance/writer/rel_change.json)
//
// Exit status: 0 success / valid; 1 invalid file or refused operation (merge-file: conflicts left);
// 2 usage error, a file that is not HDF5 (MD100), or (merge-file) an input that cannot be read.

import fs from "node:fs";
import v8 from "node:v8";

// Start-up: h5wasm's WebAssembly module is compiled when it is imported. For small inputs
// (conformance files, one parameter at a time) V8's baseline compiler alone starts much
// faster; for large inputs the optimising tier pays for itself, so it is kept.
const FAST_START_BYTES = 64 * 1024 * 1024;
function inputBytes(argv) {
  let total = 0;
  for (const a of argv) {
    try {
      const st = fs.statSync(a);
      if (st.isFile()) total += st.size;
    } catch {
      // not a file: an option or a missing path
    }
  }
  return total;
}
if (!process.env.MDIFF_JS_NO_FAST_START && inputBytes(process.argv.slice(3)) < FAST_START_BYTES) {
  v8.setFlagsFromString("--liftoff-only");
}

const { validateFile, DEFAULT_LIMITS } = await import("../src/validate.js");
const { applyFiles } = await import("../src/apply.js");
const { MdiffError, CODES } = await import("../src/codes.js");
const { Repository, checkOwner } = await import("../src/repository.js");
const { readSafetensors, writeSafetensors } = await import("../src/safetensors.js");
const { mergeStates, parseStrategy } = await import("../src/merge.js");
const { relativeChange } = await import("../src/stats.js");
const { DTYPES } = await import("../src/dtypes.js");
const { WRITE_ELEMENT } = await import("../src/elements.js");

// Optional capabilities of the conformance corpus (conformance/manifest.json `features`) that this
// implementation claims: all of them ("embedded-update-types" runs on onnxruntime-node).
// "apply-many" is a claim of the contract, no corpus feature: the command below.
const FEATURES = ["configurable-limits", "checkpoint-rule-codes", "repository", "merge", "embedded-update-types", "apply-many", "hardened"];

// The conformance contract's limit names (snake_case, as in the reference) -> ours.
const LIMIT_ALIASES = {
  max_rank: "maxRank",
  max_elements: "maxElements",
  max_dataset_bytes: "maxDatasetBytes",
  max_attribute_bytes: "maxAttributeBytes",
  max_objects: "maxObjects",
  max_depth: "maxDepth",
  max_total_bytes: "maxTotalBytes",
  max_function_bytes: "maxFunctionBytes",
  max_function_nodes: "maxFunctionNodes",
  max_function_constant_bytes: "maxFunctionConstantBytes",
};

const USAGE = `usage: mdiff-js validate [--json] [--no-data] [--limit NAME=N ...] FILE [FILE ...]
       mdiff-js apply [--json] [--limit NAME=N ...] BASE DIFF -o OUT
       mdiff-js apply-many [--json] [--limit NAME=N ...] BASE DIFF OUT [BASE DIFF OUT ...]
       mdiff-js checkout [--json] [--limit NAME=N ...] REVISION -o OUT [-C REPO_DIR]
       mdiff-js merge-file [--json] [--strategy S] [--all] OURS BASE THEIRS -o OUT
       mdiff-js features          (the conformance features claimed, as a JSON list)
       mdiff-js rel-change-vectors FILE   (writer test vectors of stats.rel_change: one JSON line each)
limits (SPEC.md §8.3) and their defaults: ${Object.entries(DEFAULT_LIMITS)
  .map(([k, v]) => `${k}=${v}`)
  .join(", ")}`;

// --limit NAME=N options -> a limits object
function limitsFrom(list) {
  const limits = { ...DEFAULT_LIMITS };
  for (const item of list) {
    const m = /^([A-Za-z_]+)=([0-9]+)$/.exec(item);
    const name = m ? LIMIT_ALIASES[m[1]] || m[1] : null;
    if (!m || !(name in DEFAULT_LIMITS)) {
      throw new Error(`bad --limit ${item}; names: ${Object.keys(DEFAULT_LIMITS).join(", ")} (or ${Object.keys(LIMIT_ALIASES).join(", ")})`);
    }
    limits[name] = typeof DEFAULT_LIMITS[name] === "bigint" ? BigInt(m[2]) : Number(m[2]);
  }
  return limits;
}

function usage(msg) {
  if (msg) process.stderr.write(`mdiff-js: ${msg}\n`);
  process.stderr.write(`${USAGE}\n`);
  process.exitCode = 2;
}

function parse(args, flags, withValue = []) {
  const opts = {};
  const pos = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === "--limit") {
      if (i + 1 >= args.length) throw new Error(`${a} needs a value`);
      (opts[a] = opts[a] || []).push(args[++i]);
    } else if (withValue.includes(a)) {
      if (i + 1 >= args.length) throw new Error(`${a} needs a value`);
      opts[a] = args[++i];
    } else if (flags.includes(a)) opts[a] = true;
    else if (a.startsWith("-") && a !== "-") throw new Error(`unknown option ${a}`);
    else pos.push(a);
  }
  return { opts, pos };
}

// A command's options and operands, its --limit options as limits; null after a usage error.
function parseOrUsage(args, flags, withValue = []) {
  try {
    const p = parse(args, flags, withValue);
    return { ...p, limits: limitsFrom(p.opts["--limit"] || []) };
  } catch (e) {
    usage(e.message);
    return null;
  }
}

async function cmdValidate(args) {
  const p = parseOrUsage(args, ["--json", "--no-data"]);
  if (!p) return;
  if (p.pos.length === 0) return usage("validate needs a FILE");
  let status = 0;
  for (const file of p.pos) {
    const v = await validateFile(file, { data: !p.opts["--no-data"], limits: p.limits });
    const r = v.result();
    v.close();
    if (p.opts["--json"]) process.stdout.write(`${JSON.stringify(r, null, 1)}\n`);
    else if (r.findings.length === 0) process.stdout.write(`${file}: valid (0 errors, 0 warnings)\n`);
    else {
      for (const f of r.findings) process.stdout.write(`${file}: ${f.code} ${f.severity} ${f.path} §${f.section} ${f.message}\n`);
    }
    const s = v.notHdf5 ? 2 : r.valid ? 0 : 1;
    status = Math.max(status, s);
  }
  process.exitCode = status;
}

async function cmdApply(args) {
  const p = parseOrUsage(args, ["--json", "-q", "--quiet"], ["-o", "--output"]);
  if (!p) return;
  const out = p.opts["-o"] || p.opts["--output"];
  if (p.pos.length !== 2 || !out) return usage("apply needs BASE DIFF -o OUT");
  const [base, diff] = p.pos;
  try {
    const r = await applyFiles(base, diff, out, { limits: p.limits });
    if (p.opts["--json"]) process.stdout.write(`${JSON.stringify(r)}\n`);
    process.exitCode = 0;
  } catch (e) {
    if (!(e instanceof MdiffError)) throw e;
    refuse(e, p.opts["--json"]);
  }
}

// Several applies in one process (the conformance runner's --batch, conformance/README.md): one
// report per (BASE, DIFF, OUT), in order, each as apply prints it; the exit status is the largest.
async function cmdApplyMany(args) {
  const p = parseOrUsage(args, ["--json", "-q", "--quiet"]);
  if (!p) return;
  if (p.pos.length === 0 || p.pos.length % 3 !== 0) return usage("apply-many needs BASE DIFF OUT, one or more times");
  let status = 0;
  for (let i = 0; i < p.pos.length; i += 3) {
    const [base, diff, out] = p.pos.slice(i, i + 3);
    try {
      const r = await applyFiles(base, diff, out, { limits: p.limits });
      if (p.opts["--json"]) process.stdout.write(`${JSON.stringify(r)}\n`);
    } catch (e) {
      if (!(e instanceof MdiffError)) throw e;
      refuse(e, p.opts["--json"]);
      status = 1;
    }
  }
  process.exitCode = status;
}

function refuse(e, json) {
  const section = CODES[e.code] ? CODES[e.code].section : null;
  if (json) {
    process.stdout.write(`${JSON.stringify({ error: { code: e.code, message: e.message, path: e.path, section } })}\n`);
  } else {
    process.stderr.write(`mdiff-js: error ${e.code}: ${e.message}${e.path ? ` [${e.path}]` : ""}\n`);
  }
  process.exitCode = 1;
}

// SPEC.md §13.4: the state at REVISION of the repository in REPO_DIR (the folder holding .mdiff/).
async function cmdCheckout(args) {
  const p = parseOrUsage(args, ["--json", "-q", "--quiet"], ["-o", "--output", "-C", "--repo"]);
  if (!p) return;
  const out = p.opts["-o"] || p.opts["--output"];
  if (p.pos.length !== 1 || !out) return usage("checkout needs REVISION -o OUT");
  const root = p.opts["-C"] || p.opts["--repo"] || ".";
  try {
    checkOwner(root);
    const repo = new Repository(root, { limits: p.limits });
    const id = await repo.resolve(p.pos[0]);
    const state = await repo.state(id);
    writeSafetensors(out, state);
    if (p.opts["--json"]) process.stdout.write(`${JSON.stringify({ commit: id, output: out, parameters: state.size })}\n`);
    else process.stdout.write(`wrote ${out} (state at ${id.slice(0, 12)}, ${state.size} parameters)\n`);
    process.exitCode = 0;
  } catch (e) {
    if (!(e instanceof MdiffError)) throw e;
    refuse(e, p.opts["--json"]);
  }
}

// SPEC.md §13.7: THEIRS merged into OURS against BASE (.safetensors files; BASE may hold no tensors), written
// to OUT; conflicts left: exit 1, nothing written, MD804 findings; an input that cannot be read: exit 2.
async function cmdMergeFile(args) {
  const p = parseOrUsage(args, ["--json", "--all", "-q", "--quiet"], ["-o", "--output", "--strategy"]);
  if (!p) return;
  const out = p.opts["-o"] || p.opts["--output"];
  if (p.pos.length !== 3 || !out) return usage("merge-file needs OURS BASE THEIRS -o OUT");
  const text = p.opts["--strategy"];
  const strategy = text === undefined ? null : parseStrategy(text);
  if (text !== undefined && !strategy) {
    return usage(`unknown strategy ${JSON.stringify(text)}: use ours, theirs, average, weighted:ALPHA or task-arithmetic[:LAMBDA]`);
  }
  if (p.opts["--all"] && !strategy) return usage("--all applies a strategy to every parameter: give one with --strategy");
  const json = p.opts["--json"];
  let states;
  try {
    states = p.pos.map((file) => readSafetensors(file));
  } catch (e) {
    if (!(e instanceof MdiffError)) throw e;
    refuse(e, json);
    process.exitCode = 2; // an input that cannot be read
    return;
  }
  const [ours, base, theirs] = states;
  const { merged, conflicts } = mergeStates(ours, base, theirs, strategy, Boolean(p.opts["--all"]));
  if (conflicts.length) {
    const findings = conflicts.map((c) => ({ code: "MD804", severity: "error", path: c.name, section: "13.7", message: c.reason }));
    if (json) process.stdout.write(`${JSON.stringify({ findings })}\n`);
    else for (const c of conflicts) process.stderr.write(`mdiff-js: error MD804: conflict ${JSON.stringify(c.name)}: ${c.reason}\n`);
    process.exitCode = 1;
    return;
  }
  try {
    writeSafetensors(out, merged);
  } catch (e) {
    if (!(e instanceof MdiffError)) throw e;
    refuse(e, json);
    return;
  }
  if (json) process.stdout.write(`${JSON.stringify({ output: out, parameters: merged.size, findings: [] })}\n`);
  else process.stdout.write(`wrote ${out} (${merged.size} parameters)\n`);
  process.exitCode = 0;
}

// conformance/writer/rel_change.json (conformance/README.md, "Writer test vectors"): each vector's old and new
// values made into little-endian bytes, its rel_change computed by src/stats.js and compared bit for bit. Prints
// {"id", "ok", "got"} per vector (got: {"bits", "decimal"} or null); exit 0 when every vector passes, else 1.
// a bit pattern in hex (most significant digit first) into `size` little-endian bytes at `offset`
function putPattern(out, offset, size, hex) {
  if (typeof hex !== "string" || !new RegExp(`^[0-9a-f]{${2 * size}}$`).test(hex)) throw new Error(`bad bit pattern ${JSON.stringify(hex)}`);
  for (let b = 0; b < size; b++) out[offset + b] = parseInt(hex.slice(2 * (size - 1 - b), 2 * (size - b)), 16);
}

// a vector's `old` or `new`: a list of bit patterns, or a formula (every term and partial sum exact in binary64)
function vectorBytes(values, dtype) {
  const size = DTYPES[dtype].size;
  if (Array.isArray(values)) {
    const out = new Uint8Array(values.length * size);
    values.forEach((hex, i) => putPattern(out, i * size, size, hex));
    return out;
  }
  const out = new Uint8Array(values.length * size);
  const view = new DataView(out.buffer);
  for (let i = 0; i < values.length; i++) {
    let x = 0;
    for (const t of values.terms) x += (((t.times * i) % t.mod) - t.minus) * 2 ** t.scale;
    WRITE_ELEMENT[dtype](view, i, x);
  }
  for (const [index, hex] of values.set || []) putPattern(out, index * size, size, hex);
  return out;
}

function binary64Hex(x) {
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, x); // big-endian: the digits as written
  return Array.from(new Uint8Array(view.buffer), (b) => b.toString(16).padStart(2, "0")).join("");
}

function cmdRelChangeVectors(args) {
  const p = parseOrUsage(args, ["--json"]);
  if (!p) return;
  if (p.pos.length !== 1) return usage("rel-change-vectors needs FILE");
  const { vectors } = JSON.parse(fs.readFileSync(p.pos[0], "utf8"));
  let failed = 0;
  for (const vector of vectors) {
    const r = relativeChange(vectorBytes(vector.old, vector.dtype), vectorBytes(vector.new, vector.dtype), vector.dtype);
    const got = r === null ? null : { bits: binary64Hex(r), decimal: String(r) };
    const ok = got === null ? vector.rel_change === null : vector.rel_change !== null && got.bits === vector.rel_change.bits;
    if (!ok) failed++;
    process.stdout.write(`${JSON.stringify({ id: vector.id, ok, got })}\n`);
  }
  process.stderr.write(`${vectors.length - failed} passed, ${failed} failed\n`);
  process.exitCode = failed ? 1 : 0;
}

async function main(argv) {
  const [cmd, ...rest] = argv;
  if (cmd === "validate") return cmdValidate(rest);
  if (cmd === "apply") return cmdApply(rest);
  if (cmd === "apply-many") return cmdApplyMany(rest);
  if (cmd === "checkout") return cmdCheckout(rest);
  if (cmd === "merge-file") return cmdMergeFile(rest);
  if (cmd === "rel-change-vectors") return cmdRelChangeVectors(rest);
  if (cmd === "features") {
    process.stdout.write(`${JSON.stringify(FEATURES)}\n`);
    return;
  }
  if (cmd === "-h" || cmd === "--help") {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  return usage(cmd ? `unknown command ${cmd}` : "a command is needed");
}

main(process.argv.slice(2)).catch((e) => {
  // A bug in this program, not a finding about the file: still no stack trace for the user.
  process.stderr.write(`mdiff-js: internal error: ${e && e.message ? e.message : e}\n`);
  if (process.env.MDIFF_JS_DEBUG) process.stderr.write(`${e && e.stack}\n`);
  process.exitCode = 3;
});
