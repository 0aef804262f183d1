// SPEC.md §6.1: dtypes, their storage datatypes and bit-pattern types.
// A storage datatype is described as { cls: "int" | "float", size, signed }.

const U = (size) => ({ cls: "int", size, signed: false });
const I = (size) => ({ cls: "int", size, signed: true });
const F = (size) => ({ cls: "float", size, signed: false });

export const DTYPES = {
  bool: { size: 1, storage: U(1), st: "BOOL", float: false },
  int8: { size: 1, storage: I(1), st: "I8", float: false },
  int16: { size: 2, storage: I(2), st: "I16", float: false },
  int32: { size: 4, storage: I(4), st: "I32", float: false },
  int64: { size: 8, storage: I(8), st: "I64", float: false },
  uint8: { size: 1, storage: U(1), st: "U8", float: false },
  uint16: { size: 2, storage: U(2), st: "U16", float: false },
  uint32: { size: 4, storage: U(4), st: "U32", float: false },
  uint64: { size: 8, storage: U(8), st: "U64", float: false },
  float16: { size: 2, storage: U(2), st: "F16", float: true },
  bfloat16: { size: 2, storage: U(2), st: "BF16", float: true },
  float32: { size: 4, storage: F(4), st: "F32", float: true },
  float64: { size: 8, storage: F(8), st: "F64", float: true },
};

export const DTYPE_NAMES = Object.keys(DTYPES);

export const SAFETENSORS_TO_DTYPE = Object.fromEntries(Object.entries(DTYPES).map(([k, v]) => [v.st, k]));

// bits(T): the unsigned integer type of the same width.
export function bitsStorage(name) {
  return U(DTYPES[name].size);
}

// The compute dtype of low_rank (§7.5).
export function computeDtype(name) {
  return name === "float64" ? "float64" : "float32";
}

export function storageName(s) {
  if (s.cls === "float") return s.size === 4 ? "float32" : s.size === 8 ? "float64" : `float${s.size * 8}`;
  return `${s.signed ? "int" : "uint"}${s.size * 8}`;
}

export function sameStorage(a, b) {
  return a.cls === b.cls && a.size === b.size && (a.cls === "float" || a.signed === b.signed);
}

export function numelOf(shape) {
  let n = 1n;
  for (const d of shape) n *= BigInt(d);
  return n;
}

// SPEC.md §8.3: the element count the limits bound: the product of the dimensions with every 0
// counted as 1 (an empty dataset of shape [0, 2^62] still declares a dimension no reader can allocate).
export function limitCountOf(shape) {
  let n = 1n;
  for (const d of shape) n *= BigInt(d) > 0n ? BigInt(d) : 1n;
  return n;
}
