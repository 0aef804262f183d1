// SPEC.md §7.1 `stats.rel_change` (‖new − old‖₂ / ‖old‖₂), computed as §11 (revision 15) says a writer that is
// to give the reference's bytes MUST compute it — written from the spec's text alone. mdiff-js writes no files:
// this is §11's writer rule implemented a second time, run on conformance/writer/rel_change.json's test vectors
// (`mdiff-js rel-change-vectors FILE`).
//
// JavaScript numbers are binary64, so binary64 operations are the language's own. A binary32 operation is
// emulated by rounding each binary64 result with Math.fround: for +, − and × of two binary32 values that gives
// the binary32 result (53 ≥ 2·24 + 2, so rounding twice is rounding once; a product is even exact in binary64),
// and a sum whose result is subnormal in binary32 is exact there. Math.sqrt and / are correctly rounded.

import { DTYPES } from "./dtypes.js";
import { READ_ELEMENT } from "./elements.js";

// §11 step 2: elements summed by halving, a block at a time
export const REL_CHANGE_BLOCK = 65536;

// The dtypes whose working format is binary32; every other dtype's is binary64.
const BINARY32 = new Set(["float16", "bfloat16", "float32"]);

function widened(bytes, dtype) {
  const size = DTYPES[dtype].size;
  if (bytes.length % size) throw new Error(`${bytes.length} bytes are not a whole number of ${dtype} values`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const read = READ_ELEMENT[dtype];
  const out = new Float64Array(bytes.length / size);
  for (let i = 0; i < out.length; i++) out[i] = read(view, i);
  return out;
}

// §11 steps 1–3 in the working format whose rounding is `round`: C, the sum of (new − old)², and B, the sum of
// old², each block of 65,536 elements summed by halving (padded with +0 to a power of two P; while more than one
// value is left, the value at k + P/2 added to the one at k for every k < P/2, and P halved), the blocks' sums
// added in binary64 in block order from +0.
function squareSums(o, n, round) {
  const c = new Float64Array(REL_CHANGE_BLOCK);
  const b = new Float64Array(REL_CHANGE_BLOCK);
  let change = 0;
  let base = 0;
  for (let start = 0; start < o.length; start += REL_CHANGE_BLOCK) {
    const length = Math.min(REL_CHANGE_BLOCK, o.length - start);
    let width = 1;
    while (width < length) width *= 2;
    for (let k = 0; k < width; k++) {
      if (k < length) {
        const d = round(n[start + k] - o[start + k]);
        c[k] = round(d * d);
        b[k] = round(o[start + k] * o[start + k]);
      } else {
        c[k] = 0; // the padding: +0
        b[k] = 0;
      }
    }
    for (let half = width / 2; half >= 1; half /= 2) {
      for (let k = 0; k < half; k++) {
        c[k] = round(c[k] + c[k + half]);
        b[k] = round(b[k] + b[k + half]);
      }
    }
    change += c[0];
    base += b[0];
  }
  return [change, base];
}

const identity = (x) => x;

function everyFinite(values) {
  for (let i = 0; i < values.length; i++) if (!Number.isFinite(values[i])) return false;
  return true;
}

// rel_change of a parameter's old and new values (Uint8Arrays of little-endian `dtype` values, as a tensor's data,
// in the order of §6.2): a number, or null where §11 step 5 leaves it out.
export function relativeChange(oldValues, newValues, dtype) {
  if (!(dtype in READ_ELEMENT)) throw new Error(`unknown dtype ${dtype}`);
  const o = widened(oldValues, dtype);
  const n = widened(newValues, dtype);
  if (o.length !== n.length) throw new Error(`old holds ${o.length} values, new ${n.length}`);
  let change;
  let base;
  if (BINARY32.has(dtype)) {
    [change, base] = squareSums(o, n, Math.fround);
    // step 4: binary32 overflowed although every value is finite: steps 1–3 again in binary64
    if (!(Number.isFinite(change) && Number.isFinite(base)) && everyFinite(o) && everyFinite(n)) {
      [change, base] = squareSums(o, n, identity);
    }
  } else {
    [change, base] = squareSums(o, n, identity);
  }
  // step 5: absent where C or B is not finite, or B is 0 and C is not; 0 where both are 0
  if (!Number.isFinite(change) || !Number.isFinite(base)) return null;
  if (base === 0) return change === 0 ? 0 : null;
  return Math.sqrt(change) / Math.sqrt(base);
}
