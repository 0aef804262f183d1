// SPEC.md §7.1, §7.3, §7.4 version 2: integer deltas of bit patterns and sparse positions as gaps.
// A stored delta z is zigzag((new − old) mod 2^W); new = old + unzigzag(z) mod 2^W, where
// unzigzag(z) = (z >> 1) XOR (0 − (z AND 1)). W = 8 × the dtype's width; 64-bit patterns use BigInt.

const TYPES = { 1: Uint8Array, 2: Uint16Array, 4: Uint32Array, 8: BigUint64Array };

// A typed-array view of bytes, copied first where they are not aligned for it.
function aligned(Type, bytes) {
  let b = bytes;
  if (b.byteOffset % Type.BYTES_PER_ELEMENT !== 0) {
    b = new Uint8Array(bytes.length);
    b.set(bytes);
  }
  return new Type(b.buffer, b.byteOffset, b.length / Type.BYTES_PER_ELEMENT);
}

// A copy of `base` (bytes of bit patterns of `width` bytes each, little-endian) with unzigzag(sub[j])
// added, modulo 2^W, to the element at positions[j] — or, when `positions` is null, sub[i] to every
// element i. Returns a Buffer.
export function addZigzag(base, width, sub, positions = null) {
  const out = new Uint8Array(base.length); // a fresh ArrayBuffer: aligned for every width
  out.set(base);
  const Type = TYPES[width];
  const bits = new Type(out.buffer, 0, out.length / width);
  const z = aligned(Type, sub);
  const at = positions === null ? (j) => j : (j) => Number(positions[j]);
  if (width === 8) {
    for (let j = 0; j < z.length; j++) {
      const d = (z[j] >> 1n) ^ -(z[j] & 1n);
      const i = at(j);
      bits[i] = BigInt.asUintN(64, bits[i] + d);
    }
  } else {
    // (z >>> 1) ^ -(z & 1) as a 32-bit two's-complement number; the typed array's store wraps it
    // modulo 2^W (ToUint8/16/32), which is exactly the arithmetic of §7.1
    for (let j = 0; j < z.length; j++) {
      const i = at(j);
      bits[i] = bits[i] + ((z[j] >>> 1) ^ -(z[j] & 1));
    }
  }
  return Buffer.from(out.buffer, 0, out.length);
}

// §7.4 version 2: the positions the gaps make (indices[0] = gaps[0], indices[j] = indices[j−1] +
// gaps[j] + 1), in BigInt so that no sum wraps. Returns {positions} or, at the first position that
// reaches `numel` (a BigInt), {error: {j, position}}.
export function positionsFromGaps(gapBytes, numel) {
  const gaps = aligned(BigUint64Array, gapBytes);
  const positions = new BigUint64Array(gaps.length);
  let position = -1n;
  for (let j = 0; j < gaps.length; j++) {
    position = position + gaps[j] + 1n;
    if (position >= numel) return { error: { j, position } };
    positions[j] = position;
  }
  return { positions };
}
