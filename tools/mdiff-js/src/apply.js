// Applying a diff (SPEC.md §9).

import { MdiffError } from "./codes.js";
import { validateFile, sha256hex } from "./validate.js";
import { readSafetensors, writeSafetensors } from "./safetensors.js";
import { DTYPES, computeDtype, numelOf } from "./dtypes.js";
import { f16BitsToNumber, bf16BitsToNumber, numberToF16Bits, numberToBf16Bits } from "./float.js";
import { H5Error } from "./hdf5.js";
import { READS_BASE_VALUE } from "./schema.js";
import { addZigzag, positionsFromGaps } from "./deltas.js";
import { runFunction } from "./embedded.js";

// A typed-array view of a Buffer, copying it when it is not aligned.
function view(Type, buf) {
  if (buf.byteOffset % Type.BYTES_PER_ELEMENT !== 0) buf = Buffer.from(buf);
  return new Type(buf.buffer, buf.byteOffset, buf.length / Type.BYTES_PER_ELEMENT);
}

function toComputeArray(dtype, data) {
  switch (dtype) {
    case "float64":
      return view(Float64Array, data);
    case "float32":
      return view(Float32Array, data);
    case "float16": {
      const h = view(Uint16Array, data);
      const out = new Float32Array(h.length);
      for (let i = 0; i < h.length; i++) out[i] = f16BitsToNumber(h[i]);
      return out;
    }
    case "bfloat16": {
      const h = view(Uint16Array, data);
      const out = new Float32Array(h.length);
      for (let i = 0; i < h.length; i++) out[i] = bf16BitsToNumber(h[i]);
      return out;
    }
    default:
      throw new Error(`low_rank on ${dtype}`);
  }
}

// result = round_T(base_C + scale_C * (A . B)), §7.5. Products and sums in C:
// for float32, every operation is rounded with Math.fround (a double holds the exact product of
// two floats, and double rounding through binary64 is innocuous for +, -, *).
export function lowRank(dtype, shape, baseData, Abuf, Bbuf, scale) {
  const C = computeDtype(dtype);
  const m = shape[0];
  const n = Number(numelOf(shape.slice(1)));
  const base = toComputeArray(dtype, baseData);
  const A = C === "float64" ? view(Float64Array, Abuf) : view(Float32Array, Abuf);
  const B = C === "float64" ? view(Float64Array, Bbuf) : view(Float32Array, Bbuf);
  const r = m > 0 ? A.length / m : n > 0 ? B.length / n : 0;
  const res = new Float64Array(m * n);
  if (C === "float64") {
    for (let i = 0; i < m; i++) {
      for (let j = 0; j < n; j++) {
        let acc = 0;
        for (let k = 0; k < r; k++) acc += A[i * r + k] * B[k * n + j];
        res[i * n + j] = base[i * n + j] + scale * acc;
      }
    }
  } else {
    const fr = Math.fround;
    const s = fr(scale);
    for (let i = 0; i < m; i++) {
      for (let j = 0; j < n; j++) {
        let acc = 0;
        for (let k = 0; k < r; k++) acc = fr(acc + fr(A[i * r + k] * B[k * n + j]));
        res[i * n + j] = fr(base[i * n + j] + fr(s * acc));
      }
    }
  }
  const T = DTYPES[dtype];
  const out = Buffer.alloc(m * n * T.size);
  if (dtype === "float64") out.set(new Uint8Array(res.buffer));
  else if (dtype === "float32") out.set(new Uint8Array(Float32Array.from(res).buffer));
  else {
    const conv = dtype === "float16" ? numberToF16Bits : numberToBf16Bits;
    const u = new Uint16Array(m * n);
    for (let i = 0; i < u.length; i++) u[i] = conv(res[i]);
    out.set(new Uint8Array(u.buffer));
  }
  return out;
}

function sameShape(a, b) {
  return a.length === b.length && a.every((x, i) => BigInt(x) === BigInt(b[i]));
}

function fail(code, message, path) {
  throw new MdiffError(code, message, path);
}

// Applies a checked file (a Validation without errors, §3-§8) to a state (Map name -> {dtype, shape,
// data}): the base checks of §9.2 first, then every result, each verified (§9.3). Returns the result
// state, a new Map; the base is left as it was. Throws MdiffError (MD600, MD601, MD603, MD602, MD409).
// `skipBaseCheckFor` holds the names whose base value is not checked against `base_sha256` (MD603): a
// repository replay passes the state's inexact values (§13.4), whose bits may differ between
// appliers, and which a writer therefore must not name (§9.2).
export async function applyValidated(v, base, { skipBaseCheckFor = new Set() } = {}) {
  // 2. base checks (§9.2), before any result is computed
  for (const prm of v.params) {
    const u = prm.update;
    if (u.type === "replace") continue;
    const t = base.get(prm.name);
    if (!t) fail("MD600", `the base has no parameter ${JSON.stringify(prm.name)} for this ${u.type} update`, prm.name);
    if (t.dtype !== u.dtype || !sameShape(t.shape, u.shape)) {
      fail(
        "MD601",
        `the base parameter ${JSON.stringify(prm.name)} is ${t.dtype}[${t.shape.join(", ")}]; the ${u.type} update needs ${u.dtype}[${u.shape.join(", ")}]`,
        prm.name,
      );
    }
  }
  // 3./4. compute and verify each result
  const result = new Map(base);
  const ds = (prm, name) => v.data(`${prm.path}/${name}`);
  for (const prm of v.params) {
    const u = prm.update;
    const T = DTYPES[u.dtype];
    const shape = u.shape.map(Number);
    let data;
    // §9.2: the base value an update reads is the one it was made from, checked as it is read and
    // before the result is computed (so MD603 comes before MD602 for the parameter)
    const emb = v.embedded.get(u.type);
    if ((READS_BASE_VALUE.has(u.type) || emb) && "base_sha256" in u && !skipBaseCheckFor.has(prm.name)) {
      const h = sha256hex(base.get(prm.name).data);
      if (h !== u.base_sha256) {
        fail("MD603", `the base value of ${JSON.stringify(prm.name)} hashes to ${h}, not the update's base_sha256 ${u.base_sha256}: the base is not the one the diff was made from`, prm.name);
      }
    }
    if (u.type === "delete") {
      result.delete(prm.name);
      continue;
    } else if (u.type === "replace") {
      data = Buffer.from(ds(prm, "value"));
    } else if (u.type === "dense" && u.version === 2) {
      data = addZigzag(base.get(prm.name).data, T.size, ds(prm, "sub"));
    } else if (u.type === "sparse" && u.version === 2) {
      const { positions, error } = positionsFromGaps(ds(prm, "gaps"), numelOf(u.shape));
      if (error) fail("MD408", `the gaps of ${JSON.stringify(prm.name)} make position ${error.position}, past the tensor`, prm.name);
      data = addZigzag(base.get(prm.name).data, T.size, ds(prm, "sub"), positions);
    } else if (u.type === "dense") {
      const x = ds(prm, "xor");
      data = Buffer.from(base.get(prm.name).data);
      for (let i = 0; i < data.length; i++) data[i] ^= x[i];
    } else if (u.type === "sparse") {
      const idx = view(BigUint64Array, ds(prm, "indices"));
      const x = ds(prm, "xor");
      data = Buffer.from(base.get(prm.name).data);
      const s = T.size;
      for (let j = 0; j < idx.length; j++) {
        const off = Number(idx[j]) * s;
        for (let b = 0; b < s; b++) data[off + b] ^= x[j * s + b];
      }
    } else if (u.type === "low_rank") {
      data = lowRank(u.dtype, shape, base.get(prm.name).data, ds(prm, "A"), ds(prm, "B"), Number(u.scale));
    } else if (emb) {
      data = await runEmbedded(v, prm, emb, base.get(prm.name).data, shape);
    }
    if (u.dtype === "bool") {
      // §9.1 step 3: a bool result must hold only 0 and 1 (MD409)
      const k = data.findIndex((x) => x > 1);
      if (k >= 0) fail("MD409", `the result for ${JSON.stringify(prm.name)} holds the bool value ${data[k]} at ${k}`, prm.name);
    }
    if (u.type !== "low_rank" && (!emb || emb.definition.exact)) {
      const h = sha256hex(data);
      if (h !== u.sha256) {
        fail("MD602", `the result for ${JSON.stringify(prm.name)} hashes to ${h}, not the update's sha256 ${u.sha256}`, prm.name);
      }
    }
    result.set(prm.name, { dtype: u.dtype, shape, data });
  }
  return result;
}

// §7.8: the result of an update of a type the file defines is its function's output (MD428 when
// the runtime refuses or fails to run it, or gives a result of another size).
async function runEmbedded(v, prm, emb, baseData, shape) {
  const u = prm.update;
  const fn = emb.functions.get(u.dtype);
  const inputs = { base: { data: baseData, shape } };
  for (const dn of emb.definition.inputs) {
    const info = v.dsInfo.get(`${prm.path}/${dn}`);
    inputs[dn] = { data: v.data(`${prm.path}/${dn}`), shape: info.meta.shape.map(Number) };
  }
  let out;
  try {
    out = await runFunction(`${fn.key}`, fn.model, inputs);
  } catch (e) {
    fail("MD428", `the function of ${JSON.stringify(u.type)} failed to run: ${e && e.message}`, prm.name);
  }
  const want = shape.reduce((a, b) => a * b, 1) * DTYPES[u.dtype].size;
  if (out.length !== want) fail("MD428", `the function of ${JSON.stringify(u.type)} gave ${out.length} bytes, not ${want}`, prm.name);
  return Buffer.from(out);
}

// §9.1 (files): applies a checked file's /files to the files of a state that has them (a repository
// state, §13.4), as a Map path -> size in bytes: a `replace` sets the file (its bytes matched its
// sha256 when they were read: MD410), a `delete` needs the base to hold the file with the size the
// update gives (MD600, MD601). Returns the new Map. (A single .safetensors base has no files: apply
// ignores /files there, as §9.1 allows; the layout changes no parameter and is not written.)
export function applyFileUpdates(v, files) {
  for (const f of v.files) {
    const u = f.update;
    if (u.type !== "delete") continue;
    if (!files.has(f.name)) fail("MD600", `the base has no file ${JSON.stringify(f.name)} for this delete update`, f.path);
    const size = files.get(f.name);
    if (size !== BigInt(u.shape[0])) {
      fail("MD601", `the base file ${JSON.stringify(f.name)} is ${size} bytes long; the delete update gives ${u.shape[0]}`, f.path);
    }
  }
  const result = new Map(files);
  for (const f of v.files) {
    if (f.update.type === "delete") result.delete(f.name);
    else result.set(f.name, BigInt(f.update.shape[0]));
  }
  return result;
}

// The first error of a checked file, thrown as an MdiffError (MD100 for a file that is not HDF5).
export function refuseInvalid(v, diffPath) {
  if (v.notHdf5) fail("MD100", v.findings[0].message, diffPath);
  const errs = v.errors;
  if (errs.length) fail(errs[0].code, `${diffPath} is invalid (${errs.length} error${errs.length > 1 ? "s" : ""}): ${errs[0].message}`, errs[0].path);
}

// Anything a file makes the applier throw, as an MdiffError.
export function asMdiffError(e, diffPath) {
  if (e instanceof MdiffError) return e;
  if (e instanceof H5Error) return new MdiffError("MD513", `${diffPath}: ${e.message}`);
  // Anything else (e.g. a RangeError for a tensor too large for this process) still gets a code.
  return new MdiffError("MD513", `${diffPath}: cannot be applied: ${e && e.name}: ${e && e.message}`);
}

export async function applyFiles(basePath, diffPath, outPath, opts = {}) {
  // 1. open the file and check it against §3-§8
  const v = await validateFile(diffPath, opts);
  try {
    refuseInvalid(v, diffPath);
    const base = readSafetensors(basePath);
    const result = await applyValidated(v, base);
    // 5. the result state
    writeSafetensors(outPath, result);
    return { output: outPath, parameters: result.size };
  } catch (e) {
    throw asMdiffError(e, diffPath);
  } finally {
    v.close();
  }
}
