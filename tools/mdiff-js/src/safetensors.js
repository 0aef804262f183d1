// Reading and writing .safetensors checkpoints (SPEC.md §10: MD700, MD701, MD702).
//
// Format: 8-byte little-endian u64 N, N bytes of JSON header
//   {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__"?: {str: str}},
// then the data; offsets are relative to the start of the data.

import fs from "node:fs";
import path from "node:path";
import { MdiffError } from "./codes.js";
import { parseStrict, isPlainObject, isInteger, describe } from "./json.js";
import { DTYPES, SAFETENSORS_TO_DTYPE, numelOf } from "./dtypes.js";
import { compareUtf8 } from "./names.js";

// SPEC.md §10: the dtypes the safetensors format defines outside §6.1 (MD702); any other unknown string is a
// malformed file (MD701).
const KNOWN_OTHER = new Set(["F4", "F6_E2M3", "F6_E3M2", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "C64"]);

// Returns Map name -> {dtype, shape: number[], data: Buffer}
export function readSafetensors(file) {
  if (path.extname(file).toLowerCase() !== ".safetensors") {
    throw new MdiffError("MD700", `${file}: this applier reads .safetensors checkpoints only`);
  }
  let buf;
  try {
    buf = fs.readFileSync(file);
  } catch (e) {
    throw new MdiffError("MD701", `${file}: cannot be read: ${e.message}`);
  }
  const bad = (why) => new MdiffError("MD701", `${file}: malformed safetensors file: ${why}`);
  if (buf.length < 8) throw bad("shorter than 8 bytes");
  const n = buf.readBigUInt64LE(0);
  if (n > BigInt(buf.length - 8)) throw bad(`the header length ${n} exceeds the file`);
  let header;
  try {
    const text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(buf.subarray(8, 8 + Number(n))); // a BOM is kept: not JSON
    header = parseStrict(text);
  } catch (e) {
    throw bad(`the header is not valid UTF-8 JSON: ${e.message}`);
  }
  if (!isPlainObject(header)) throw bad("the header is not a JSON object");
  const data = buf.subarray(8 + Number(n));
  const out = new Map();
  const spans = [];
  for (const [name, e] of Object.entries(header)) {
    if (name === "__metadata__") {
      if (e === null) continue; // as the safetensors library reads it: no metadata
      if (!isPlainObject(e) || Object.values(e).some((v) => typeof v !== "string")) throw bad("__metadata__ is not an object of strings");
      continue;
    }
    if (!isPlainObject(e)) throw bad(`entry ${describe(name)} is not an object`);
    const keys = Object.keys(e).sort().join(",");
    if (keys !== "data_offsets,dtype,shape") throw bad(`entry ${describe(name)} is not exactly dtype, shape and data_offsets`);
    if (typeof e.dtype !== "string") throw bad(`entry ${describe(name)} has no string dtype`);
    const dtype = SAFETENSORS_TO_DTYPE[e.dtype];
    if (!dtype) {
      if (!KNOWN_OTHER.has(e.dtype)) throw bad(`tensor ${describe(name)}: ${describe(e.dtype)} is not a safetensors dtype`);
      throw new MdiffError("MD702", `${file}: tensor ${describe(name)} has dtype ${describe(e.dtype)}, which mdiff does not support`);
    }
    if (!Array.isArray(e.shape) || !e.shape.every((d) => isInteger(d) && d >= 0)) throw bad(`entry ${describe(name)} has a bad shape`);
    const off = e.data_offsets;
    if (!Array.isArray(off) || off.length !== 2 || !off.every((d) => isInteger(d) && d >= 0)) throw bad(`entry ${describe(name)} has bad data_offsets`);
    const [b, en] = off.map(BigInt);
    const nbytes = numelOf(e.shape) * BigInt(DTYPES[dtype].size);
    if (en < b || en - b !== nbytes) throw bad(`entry ${describe(name)}: data_offsets [${b}, ${en}] do not hold ${nbytes} bytes`);
    if (en > BigInt(data.length)) throw bad(`entry ${describe(name)}: data_offsets end after the file`);
    spans.push([Number(b), Number(en), name]);
    const bytes = data.subarray(Number(b), Number(en));
    // §6.1, §10: a bool is 0 or 1; a checkpoint holding another byte is malformed
    if (dtype === "bool" && bytes.some((x) => x > 1)) throw bad(`bool tensor ${describe(name)} holds a byte other than 0 or 1`);
    out.set(name, { dtype, shape: e.shape.map(Number), data: bytes });
  }
  // SPEC.md §10: sorted, the data_offsets tile the data: no gap, no shared byte, nothing after the last.
  spans.sort((x, y) => x[0] - y[0] || x[1] - y[1]);
  let end = 0;
  let previous = null;
  for (const [b, en, name] of spans) {
    if (b < end) throw bad(`tensors ${describe(previous)} and ${describe(name)} overlap`);
    if (b > end) throw bad(`${b - end} bytes ${previous === null ? "before the first tensor" : `after tensor ${describe(previous)}`} belong to no tensor`);
    end = en;
    previous = name;
  }
  if (end !== data.length) throw bad(`${data.length - end} bytes after the last tensor belong to no tensor`);
  return out;
}

// Writes Map name -> {dtype, shape, data} atomically (a temporary file, then a rename).
export function writeSafetensors(file, tensors) {
  if (path.extname(file).toLowerCase() !== ".safetensors") {
    throw new MdiffError("MD700", `${file}: this applier writes .safetensors checkpoints only`);
  }
  const names = [...tensors.keys()].sort(compareUtf8);
  if (tensors.has("__metadata__")) {
    throw new MdiffError("MD703", `${file}: a parameter named "__metadata__" cannot be stored in a .safetensors file`, "__metadata__");
  }
  const header = {};
  let offset = 0;
  for (const name of names) {
    const t = tensors.get(name);
    header[name] = { dtype: DTYPES[t.dtype].st, shape: t.shape, data_offsets: [offset, offset + t.data.length] };
    offset += t.data.length;
  }
  let json = Buffer.from(JSON.stringify(header), "utf8");
  const pad = (8 - (json.length % 8)) % 8;
  if (pad) json = Buffer.concat([json, Buffer.alloc(pad, 0x20)]);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(json.length));
  const tmp = `${file}.tmp-${process.pid}`;
  const fd = fs.openSync(tmp, "w");
  try {
    fs.writeSync(fd, len);
    fs.writeSync(fd, json);
    for (const name of names) {
      const d = tensors.get(name).data;
      let done = 0;
      while (done < d.length) done += fs.writeSync(fd, d, done, d.length - done);
    }
    fs.closeSync(fd);
    fs.renameSync(tmp, file);
  } catch (e) {
    try {
      fs.closeSync(fd);
    } catch {
      /* already closed */
    }
    try {
      fs.unlinkSync(tmp);
    } catch {
      /* nothing to remove */
    }
    throw e;
  }
}
