// `node:zlib` for the browser, as far as src/validate.js uses it: inflateSync (a zlib stream: header,
// DEFLATE blocks of RFC 1951, Adler-32) with maxOutputLength, synchronous as the validator calls it.
// Errors carry Node's codes where the validator reads them (ERR_BUFFER_TOO_LARGE).
import { Buffer } from "./buffer.js";

const LENGTH_BASE = [3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258];
const LENGTH_EXTRA = [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0];
const DIST_BASE = [1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577];
const DIST_EXTRA = [0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13];
const CL_ORDER = [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15];

function fail(message, code = "Z_DATA_ERROR") {
  const e = new Error(message);
  e.code = code;
  return e;
}

// A canonical Huffman code from code lengths: counts per length and symbols in code order (RFC 1951 §3.2.2).
// As zlib's inflate_table: an over-subscribed set is refused, an incomplete one too unless it is a single code
// of length 1 in a literal/length or distance code (never in the code-length code).
function huffman(lengths, codeLengths = false, fixed = false) {
  const counts = new Uint16Array(16);
  let max = 0;
  for (const l of lengths) {
    counts[l]++;
    if (l > max) max = l;
  }
  counts[0] = 0;
  let left = 1;
  for (let l = 1; l < 16; l++) {
    left = left * 2 - counts[l];
    if (left < 0) throw fail(codeLengths ? "invalid code lengths set" : "invalid literal/lengths set");
  }
  if (!fixed && max > 0 && left > 0 && (codeLengths || max !== 1)) throw fail(codeLengths ? "invalid code lengths set" : "invalid literal/lengths set");
  const offs = new Uint16Array(16);
  for (let l = 1; l < 15; l++) offs[l + 1] = offs[l] + counts[l];
  const symbols = new Uint16Array(lengths.length);
  lengths.forEach((l, s) => {
    if (l) symbols[offs[l]++] = s;
  });
  return { counts, symbols };
}

class Inflater {
  constructor(input, limit) {
    this.input = input;
    this.pos = 0;
    this.bit = 0;
    this.bits = 0;
    this.limit = limit;
    this.out = new Uint8Array(Math.min(limit, Math.max(1024, input.length * 4)));
    this.n = 0;
  }

  need(k) {
    while (this.bits < k) {
      if (this.pos >= this.input.length) throw fail("unexpected end of file", "Z_BUF_ERROR");
      this.bit |= this.input[this.pos++] << this.bits;
      this.bits += 8;
    }
  }

  take(k) {
    if (k === 0) return 0;
    this.need(k);
    const v = this.bit & ((1 << k) - 1);
    this.bit >>>= k;
    this.bits -= k;
    return v;
  }

  decode({ counts, symbols }) {
    let code = 0;
    let first = 0;
    let index = 0;
    for (let l = 1; l < 16; l++) {
      code |= this.take(1);
      const c = counts[l];
      if (code - c < first) return symbols[index + (code - first)];
      index += c;
      first = (first + c) << 1;
      code <<= 1;
    }
    throw fail("invalid code");
  }

  emit(byte) {
    if (this.n >= this.out.length) {
      if (this.n >= this.limit) throw fail("Cannot create a Buffer larger than maxOutputLength", "ERR_BUFFER_TOO_LARGE");
      const bigger = new Uint8Array(Math.min(this.limit, this.out.length * 2));
      bigger.set(this.out);
      this.out = bigger;
    }
    this.out[this.n++] = byte;
  }

  stored() {
    this.bit = 0;
    this.bits = 0;
    if (this.pos + 4 > this.input.length) throw fail("unexpected end of file", "Z_BUF_ERROR");
    const len = this.input[this.pos] | (this.input[this.pos + 1] << 8);
    const nlen = this.input[this.pos + 2] | (this.input[this.pos + 3] << 8);
    if ((len ^ 0xffff) !== nlen) throw fail("invalid stored block lengths");
    this.pos += 4;
    if (this.pos + len > this.input.length) throw fail("unexpected end of file", "Z_BUF_ERROR");
    for (let i = 0; i < len; i++) this.emit(this.input[this.pos + i]);
    this.pos += len;
  }

  codes(lit, dist) {
    for (;;) {
      const s = this.decode(lit);
      if (s < 256) this.emit(s);
      else if (s === 256) return;
      else {
        const li = s - 257;
        if (li >= 29) throw fail("invalid literal/length code");
        const length = LENGTH_BASE[li] + this.take(LENGTH_EXTRA[li]);
        const di = this.decode(dist);
        if (di >= 30) throw fail("invalid distance code");
        const d = DIST_BASE[di] + this.take(DIST_EXTRA[di]);
        if (d > this.n) throw fail("invalid distance too far back");
        for (let i = 0; i < length; i++) this.emit(this.out[this.n - d]);
      }
    }
  }

  dynamic() {
    const nlen = this.take(5) + 257;
    const ndist = this.take(5) + 1;
    const ncode = this.take(4) + 4;
    if (nlen > 286 || ndist > 30) throw fail("too many length or distance symbols");
    const cl = new Array(19).fill(0);
    for (let i = 0; i < ncode; i++) cl[CL_ORDER[i]] = this.take(3);
    const clCode = huffman(cl, true);
    const lengths = [];
    while (lengths.length < nlen + ndist) {
      const s = this.decode(clCode);
      if (s < 16) lengths.push(s);
      else {
        let repeat;
        let value = 0;
        if (s === 16) {
          if (!lengths.length) throw fail("invalid bit length repeat");
          value = lengths[lengths.length - 1];
          repeat = 3 + this.take(2);
        } else if (s === 17) repeat = 3 + this.take(3);
        else repeat = 11 + this.take(7);
        if (lengths.length + repeat > nlen + ndist) throw fail("invalid bit length repeat");
        for (let i = 0; i < repeat; i++) lengths.push(value);
      }
    }
    if (lengths[256] === 0) throw fail("invalid code -- missing end-of-block");
    this.codes(huffman(lengths.slice(0, nlen)), huffman(lengths.slice(nlen)));
  }

  run() {
    let last = 0;
    while (!last) {
      last = this.take(1);
      const type = this.take(2);
      if (type === 0) this.stored();
      else if (type === 1) {
        const l = new Array(288).fill(8, 0, 144).fill(9, 144, 256).fill(7, 256, 280).fill(8, 280, 288);
        this.codes(huffman(l, false, true), huffman(new Array(30).fill(5), false, true));
      } else if (type === 2) this.dynamic();
      else throw fail("invalid block type");
    }
    return this.out.subarray(0, this.n);
  }
}

function adler32(bytes) {
  let a = 1;
  let b = 0;
  for (let i = 0; i < bytes.length; ) {
    const end = Math.min(bytes.length, i + 3800);
    for (; i < end; i++) {
      a += bytes[i];
      b += a;
    }
    a %= 65521;
    b %= 65521;
  }
  return ((b << 16) | a) >>> 0;
}

export function inflateSync(input, { maxOutputLength = 2 ** 32 } = {}) {
  const bytes = new Uint8Array(input.buffer, input.byteOffset, input.byteLength);
  if (bytes.length < 2) throw fail("unexpected end of file", "Z_BUF_ERROR");
  const cmf = bytes[0];
  const flg = bytes[1];
  if ((cmf & 0x0f) !== 8 || (cmf >> 4) > 7 || ((cmf << 8) | flg) % 31 !== 0) throw fail("incorrect header check");
  if (flg & 0x20) throw fail("need dictionary", "Z_NEED_DICT");
  const inflater = new Inflater(bytes.subarray(2), maxOutputLength);
  const out = inflater.run();
  const at = 2 + inflater.pos;
  if (at + 4 > bytes.length) throw fail("unexpected end of file", "Z_BUF_ERROR");
  const stored = ((bytes[at] << 24) | (bytes[at + 1] << 16) | (bytes[at + 2] << 8) | bytes[at + 3]) >>> 0;
  if (stored !== adler32(out)) throw fail("incorrect data check");
  return Buffer.from(out);
}

export default { inflateSync };
