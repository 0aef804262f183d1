// Conversions between float16 / bfloat16 / float32 bit patterns and JS numbers, and rounding
// to nearest, ties to even, done with exact operations on doubles (divisions by powers of two).

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

export function f16BitsToNumber(h) {
  const sign = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0x1f) return m ? NaN : sign * Infinity;
  if (e === 0) return sign * m * 2 ** -24;
  return sign * (1024 + m) * 2 ** (e - 25);
}

export function bf16BitsToNumber(h) {
  u32[0] = (h << 16) >>> 0;
  return f32[0];
}

function roundHalfEven(q) {
  const f = Math.floor(q);
  const d = q - f;
  if (d > 0.5) return f + 1;
  if (d < 0.5) return f;
  return f % 2 === 0 ? f : f + 1;
}

// Rounds a JS number to a binary format with `mant` fraction bits and exponent bias `bias`
// (max exponent = bias), to nearest, ties to even; returns the bit pattern.
function roundTo(x, mant, expBits, bias, qnan) {
  const signBit = 2 ** (mant + expBits);
  const inf = (2 ** expBits - 1) * 2 ** mant;
  if (Number.isNaN(x)) return qnan;
  const sign = x < 0 || Object.is(x, -0) ? signBit : 0;
  const a = Math.abs(x);
  if (a === Infinity) return sign + inf;
  const emin = 1 - bias;
  if (a < 2 ** emin) {
    // subnormal (or zero): quantum 2^(emin - mant); a result of 2^mant is the smallest normal
    const r = roundHalfEven(a / 2 ** (emin - mant));
    return sign + r;
  }
  let e = Math.floor(Math.log2(a));
  if (2 ** e > a) e--;
  if (2 ** (e + 1) <= a) e++;
  if (e > bias) return sign + inf;
  let r = roundHalfEven(a / 2 ** (e - mant)); // in [2^mant, 2^(mant+1)]
  if (r === 2 ** (mant + 1)) {
    r = 2 ** mant;
    e++;
  }
  if (e > bias) return sign + inf;
  return sign + (e + bias) * 2 ** mant + (r - 2 ** mant);
}

export function numberToF16Bits(x) {
  return roundTo(x, 10, 5, 15, 0x7e00);
}

export function numberToBf16Bits(x) {
  return roundTo(x, 7, 8, 127, 0x7fc0);
}
