// Element i of a little-endian DataView as a JavaScript number (binary64), and a number stored as element i, for
// every dtype of SPEC.md §6.1.
//
// Read: the floating-point dtypes exactly (float16 and bfloat16 widen exactly to binary32, and so to binary64),
// integers rounded to nearest binary64, ties to even (Number() of a BigInt does so; every 8-, 16- and 32-bit
// integer is exact), bool as 0 or 1.
// Write: a number rounded once to the dtype, to nearest, ties to even (float32: as Math.fround; float16 and
// bfloat16 by src/float.js); integers as given (BigInt for the 64-bit ones), bool as 0 or 1.

import { bf16BitsToNumber, f16BitsToNumber, numberToBf16Bits, numberToF16Bits } from "./float.js";

export const READ_ELEMENT = {
  bool: (v, i) => (v.getUint8(i) ? 1 : 0),
  int8: (v, i) => v.getInt8(i),
  int16: (v, i) => v.getInt16(2 * i, true),
  int32: (v, i) => v.getInt32(4 * i, true),
  int64: (v, i) => Number(v.getBigInt64(8 * i, true)),
  uint8: (v, i) => v.getUint8(i),
  uint16: (v, i) => v.getUint16(2 * i, true),
  uint32: (v, i) => v.getUint32(4 * i, true),
  uint64: (v, i) => Number(v.getBigUint64(8 * i, true)),
  float16: (v, i) => f16BitsToNumber(v.getUint16(2 * i, true)),
  bfloat16: (v, i) => bf16BitsToNumber(v.getUint16(2 * i, true)),
  float32: (v, i) => v.getFloat32(4 * i, true),
  float64: (v, i) => v.getFloat64(8 * i, true),
};

export const WRITE_ELEMENT = {
  bool: (v, i, x) => v.setUint8(i, x ? 1 : 0),
  int8: (v, i, x) => v.setInt8(i, x),
  int16: (v, i, x) => v.setInt16(2 * i, x, true),
  int32: (v, i, x) => v.setInt32(4 * i, x, true),
  int64: (v, i, x) => v.setBigInt64(8 * i, BigInt(x), true),
  uint8: (v, i, x) => v.setUint8(i, x),
  uint16: (v, i, x) => v.setUint16(2 * i, x, true),
  uint32: (v, i, x) => v.setUint32(4 * i, x, true),
  uint64: (v, i, x) => v.setBigUint64(8 * i, BigInt(x), true),
  float16: (v, i, x) => v.setUint16(2 * i, numberToF16Bits(x), true),
  bfloat16: (v, i, x) => v.setUint16(2 * i, numberToBf16Bits(x), true),
  float32: (v, i, x) => v.setFloat32(4 * i, x, true),
  float64: (v, i, x) => v.setFloat64(8 * i, x, true),
};
