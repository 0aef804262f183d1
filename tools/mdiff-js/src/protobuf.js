// A bounded protobuf (proto2) decoder for ONNX models (SPEC.md §7.8 check 1), driven by the message
// schema of onnx_proto.js. It accepts what protobuf's own parsers accept: a field of a known number
// but another wire type, or of an unknown number, is skipped (groups too, nested); a closed enum's
// unknown value leaves the field unset; a singular message given twice is merged; repeated scalars
// come packed or not; int32 values are the low 32 bits of the varint. It refuses a truncated value,
// a length past the end, wire types 6 and 7, field number 0, a varint of more than 10 bytes, a
// mismatched end-group, and more than 100 messages and groups nested below the top one (protobuf's
// default limit). Inside an unknown group it checks wire types and the end tag, not field numbers.

import { ONNX_MESSAGES } from "./onnx_proto.js";

export class ProtobufError extends Error {}

const MAX_DEPTH = 100;
const WIRE = { int64: 0, uint64: 0, int32: 0, uint32: 0, bool: 0, enum: 0, float: 5, double: 1, string: 2, bytes: 2, message: 2 };
const utf8 = new TextDecoder("utf-8", { fatal: true });

// A proto2 string field is not checked to be UTF-8: bytes that are not become a string no valid one
// can equal (a lone surrogate, then the bytes in hex), so that names compare as their bytes do.
function text(bytes) {
  try {
    return utf8.decode(bytes);
  } catch {
    return `\ud800${Buffer.from(bytes).toString("hex")}`;
  }
}

class Reader {
  constructor(buf, start, end) {
    this.buf = buf;
    this.pos = start;
    this.end = end;
  }
  varint() {
    let v = 0n;
    for (let i = 0; i < 10; i++) {
      if (this.pos >= this.end) throw new ProtobufError("truncated varint");
      const b = this.buf[this.pos++];
      v |= BigInt(b & 0x7f) << BigInt(7 * i);
      if (!(b & 0x80)) return BigInt.asUintN(64, v);
    }
    throw new ProtobufError("varint longer than 10 bytes");
  }
  take(n) {
    if (n > BigInt(this.end - this.pos)) throw new ProtobufError("length past the end");
    const start = this.pos;
    this.pos += Number(n);
    return [start, this.pos];
  }
  fixed(n) {
    const [s] = this.take(BigInt(n));
    return new DataView(this.buf.buffer, this.buf.byteOffset + s, n);
  }
}

function scalar(kind, raw) {
  switch (kind) {
    case "int64":
      return BigInt.asIntN(64, raw);
    case "uint64":
      return raw;
    case "int32":
    case "enum":
      return Number(BigInt.asIntN(32, raw));
    case "uint32":
      return Number(BigInt.asUintN(32, raw));
    case "bool":
      return raw !== 0n;
    default:
      throw new Error(kind);
  }
}

// Skips one field's value of wire type `wt` (the tag is read); `field` for an end-group check.
function skip(r, wt, field, depth) {
  if (wt === 0) r.varint();
  else if (wt === 1) r.take(8n);
  else if (wt === 5) r.take(4n);
  else if (wt === 2) r.take(r.varint());
  else if (wt === 3) {
    if (depth + 1 > MAX_DEPTH) throw new ProtobufError("nested too deep");
    for (;;) {
      const tag = readTag(r, true); // inside a skipped group protobuf does not check the field number
      if (tag === null) throw new ProtobufError("unterminated group");
      if (tag.wt === 4) {
        if (tag.field !== field) throw new ProtobufError("mismatched end-group");
        return;
      }
      skip(r, tag.wt, tag.field, depth + 1);
    }
  } else throw new ProtobufError(`wire type ${wt}`);
}

function readTag(r, anyField = false) {
  if (r.pos >= r.end) return null;
  const tag = r.varint();
  if (tag > 0xffffffffn) throw new ProtobufError("tag beyond 32 bits");
  const field = Number(tag >> 3n);
  const wt = Number(tag & 7n);
  if (field === 0 && !anyField) throw new ProtobufError("field number 0");
  if (wt === 6 || wt === 7) throw new ProtobufError(`wire type ${wt}`);
  return { field, wt };
}

function fixedValue(kind, dv) {
  if (kind === "float") return dv.getFloat32(0, true);
  return dv.getFloat64(0, true);
}

// Decodes buf[start:end] into `obj` (merging) as message `type`.
function decodeInto(obj, type, buf, start, end, depth) {
  if (depth > MAX_DEPTH) throw new ProtobufError("nested too deep");
  const fields = ONNX_MESSAGES[type];
  const r = new Reader(buf, start, end);
  for (;;) {
    const tag = readTag(r);
    if (tag === null) return obj;
    if (tag.wt === 4) throw new ProtobufError("end-group outside a group");
    const f = fields[tag.field];
    const want = f ? WIRE[f.kind] : -1;
    const packed = f && f.repeated && tag.wt === 2 && want !== 2;
    if (!f || (tag.wt !== want && !packed)) {
      skip(r, tag.wt, tag.field, depth);
      continue;
    }
    if (f.oneof) {
      // setting one member of a oneof clears the others (a message member set again still merges)
      for (const g of Object.values(fields)) if (g.oneof === f.oneof && g.name !== f.name) delete obj[g.name];
    }
    const put = (v) => {
      if (f.repeated) (obj[f.name] ||= []).push(v);
      else obj[f.name] = v;
    };
    const enumOk = (v) => f.kind !== "enum" || f.values.includes(v);
    if (packed) {
      const [s, e] = r.take(r.varint());
      const inner = new Reader(buf, s, e);
      while (inner.pos < inner.end) {
        const v = want === 0 ? scalar(f.kind, inner.varint()) : fixedValue(f.kind, inner.fixed(want === 5 ? 4 : 8));
        if (enumOk(v)) put(v);
      }
      obj[f.name] ||= [];
    } else if (f.kind === "message") {
      const [s, e] = r.take(r.varint());
      if (f.repeated) put(decodeInto({}, f.message, buf, s, e, depth + 1));
      else obj[f.name] = decodeInto(obj[f.name] || {}, f.message, buf, s, e, depth + 1);
    } else if (f.kind === "string" || f.kind === "bytes") {
      const [s, e] = r.take(r.varint());
      const bytes = buf.subarray(s, e);
      put(f.kind === "string" ? text(bytes) : bytes);
    } else if (want === 0) {
      const v = scalar(f.kind, r.varint());
      if (enumOk(v)) put(v);
    } else {
      put(fixedValue(f.kind, r.fixed(want === 5 ? 4 : 8)));
    }
  }
}

// An ONNX ModelProto from its bytes (a Uint8Array), as plain objects keyed by field name; repeated
// fields are arrays (absent when empty), int64/uint64 are BigInt, bytes are Uint8Array views.
export function decodeModel(bytes) {
  return decodeInto({}, "onnx.ModelProto", bytes, 0, bytes.length, 0); // depth: messages and groups below the top
}

// ---- encoding (for mdiff-js's own wrapper around a checked model: see embedded.js)

function varintBytes(v) {
  let x = BigInt.asUintN(64, BigInt(v));
  const out = [];
  do {
    let b = Number(x & 0x7fn);
    x >>= 7n;
    if (x) b |= 0x80;
    out.push(b);
  } while (x);
  return out;
}

// Encodes a decoded message (as decodeModel gives it) back to bytes: known fields only, in field order.
export function encodeMessage(obj, type = "onnx.ModelProto") {
  const parts = [];
  const fields = ONNX_MESSAGES[type];
  const push = (arr) => parts.push(Uint8Array.from(arr));
  for (const num of Object.keys(fields).map(Number).sort((a, b) => a - b)) {
    const f = fields[num];
    if (!(f.name in obj)) continue;
    const values = f.repeated ? obj[f.name] : [obj[f.name]];
    for (const v of values) {
      const wt = WIRE[f.kind];
      push(varintBytes((BigInt(num) << 3n) | BigInt(wt)));
      if (f.kind === "message") {
        const inner = encodeMessage(v, f.message);
        push(varintBytes(inner.length));
        parts.push(inner);
      } else if (f.kind === "string" || f.kind === "bytes") {
        const b = typeof v === "string" ? new TextEncoder().encode(v) : v;
        push(varintBytes(b.length));
        parts.push(b);
      } else if (wt === 0) {
        push(varintBytes(typeof v === "boolean" ? (v ? 1 : 0) : v));
      } else {
        const b = new Uint8Array(wt === 5 ? 4 : 8);
        const dv = new DataView(b.buffer);
        if (wt === 5) dv.setFloat32(0, v, true);
        else dv.setFloat64(0, v, true);
        parts.push(b);
      }
    }
  }
  return Buffer.concat(parts);
}
