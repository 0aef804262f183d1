// The part of Node's Buffer that mdiff-js's reader uses (src/h5raw.js, validate.js, names.js, paths.js, …),
// for the browser: a Uint8Array with little-endian reads, encodings, comparison and copy. build.mjs maps
// `node:buffer` here, and the worker installs it as globalThis.Buffer (globals.js) before src/ loads.

const utf8 = new TextEncoder();
const strictUtf8 = new TextDecoder("utf-8", { fatal: true });
const lenientUtf8 = new TextDecoder("utf-8");

export class Buffer extends Uint8Array {
  static alloc(n, fill = 0) {
    const b = new Buffer(n);
    if (fill) b.fill(fill);
    return b;
  }

  static from(value, encodingOrOffset, length) {
    if (typeof value === "string") {
      const enc = encodingOrOffset || "utf8";
      if (enc === "utf8" || enc === "utf-8") return Buffer.fromView(utf8.encode(value));
      if (enc === "latin1" || enc === "binary") return Buffer.from(Array.from(value, (c) => c.charCodeAt(0) & 0xff));
      if (enc === "hex") {
        const out = new Buffer(value.length >> 1);
        for (let i = 0; i < out.length; i++) out[i] = parseInt(value.substr(2 * i, 2), 16);
        return out;
      }
      throw new TypeError(`Buffer.from: encoding ${enc} is not supported in the browser`);
    }
    if (value instanceof ArrayBuffer || (typeof SharedArrayBuffer !== "undefined" && value instanceof SharedArrayBuffer)) {
      const offset = encodingOrOffset || 0;
      return new Buffer(value, offset, length === undefined ? value.byteLength - offset : length);
    }
    if (ArrayBuffer.isView(value)) {
      const out = new Buffer(value.byteLength);
      out.set(new Uint8Array(value.buffer, value.byteOffset, value.byteLength));
      return out;
    }
    const out = new Buffer(value.length);
    for (let i = 0; i < value.length; i++) out[i] = value[i];
    return out;
  }

  // a Buffer over the same memory as a Uint8Array (no copy)
  static fromView(view) {
    return new Buffer(view.buffer, view.byteOffset, view.byteLength);
  }

  static byteLength(s, encoding = "utf8") {
    if (typeof s !== "string") return s.byteLength;
    if (encoding !== "utf8" && encoding !== "utf-8") throw new TypeError(`Buffer.byteLength: encoding ${encoding}`);
    return utf8.encode(s).length;
  }

  static compare(a, b) {
    const n = Math.min(a.length, b.length);
    for (let i = 0; i < n; i++) if (a[i] !== b[i]) return a[i] < b[i] ? -1 : 1;
    return a.length === b.length ? 0 : a.length < b.length ? -1 : 1;
  }

  static concat(list, total) {
    const n = total === undefined ? list.reduce((s, b) => s + b.length, 0) : total;
    const out = new Buffer(n);
    let at = 0;
    for (const b of list) {
      out.set(b.subarray(0, Math.min(b.length, n - at)), at);
      at += b.length;
      if (at >= n) break;
    }
    return out;
  }

  static isBuffer(x) {
    return x instanceof Buffer;
  }

  equals(other) {
    return Buffer.compare(this, other) === 0;
  }

  compare(other) {
    return Buffer.compare(this, other);
  }

  copy(target, targetStart = 0, sourceStart = 0, sourceEnd = this.length) {
    const part = this.subarray(sourceStart, Math.min(sourceEnd, sourceStart + target.length - targetStart));
    target.set(part, targetStart);
    return part.length;
  }

  view() {
    return new DataView(this.buffer, this.byteOffset, this.byteLength);
  }

  check(offset, n) {
    if (!Number.isInteger(offset) || offset < 0 || offset + n > this.length) {
      throw new RangeError(`The value of "offset" is out of range. It must be >= 0 and <= ${this.length - n}. Received ${offset}`);
    }
  }

  readUInt8(o = 0) {
    this.check(o, 1);
    return this[o];
  }

  readUInt16LE(o = 0) {
    this.check(o, 2);
    return this.view().getUint16(o, true);
  }

  readUInt32LE(o = 0) {
    this.check(o, 4);
    return this.view().getUint32(o, true);
  }

  readInt32LE(o = 0) {
    this.check(o, 4);
    return this.view().getInt32(o, true);
  }

  readBigUInt64LE(o = 0) {
    this.check(o, 8);
    return this.view().getBigUint64(o, true);
  }

  readBigInt64LE(o = 0) {
    this.check(o, 8);
    return this.view().getBigInt64(o, true);
  }

  writeBigUInt64BE(value, o = 0) {
    this.check(o, 8);
    this.view().setBigUint64(o, BigInt(value), false);
    return o + 8;
  }

  readFloatLE(o = 0) {
    this.check(o, 4);
    return this.view().getFloat32(o, true);
  }

  readDoubleLE(o = 0) {
    this.check(o, 8);
    return this.view().getFloat64(o, true);
  }

  toString(encoding = "utf8", start = 0, end = this.length) {
    const part = this.subarray(start, end);
    if (encoding === "utf8" || encoding === "utf-8") return lenientUtf8.decode(part);
    if (encoding === "latin1" || encoding === "binary" || encoding === "ascii") {
      let s = "";
      for (let i = 0; i < part.length; i += 8192) s += String.fromCharCode(...part.subarray(i, i + 8192));
      return s;
    }
    if (encoding === "hex") return Array.from(part, (b) => b.toString(16).padStart(2, "0")).join("");
    throw new TypeError(`Buffer.toString: encoding ${encoding} is not supported in the browser`);
  }
}

export function isUtf8(bytes) {
  try {
    strictUtf8.decode(bytes);
    return true;
  } catch {
    return false;
  }
}

export default { Buffer, isUtf8 };
