// SPEC.md §7.8-§7.9: update types a file defines itself as ONNX functions. The checks 1-7 of §7.8
// on a function's bytes (decoded by protobuf.js), the shape rules of §7.9 for check 8, and running a
// checked function on onnxruntime-node (loaded only when a file holds such a type).

import { decodeModel, encodeMessage, ProtobufError } from "./protobuf.js";
import { isPlainObject, isInteger, describe } from "./json.js";

export const TYPE_NAME = /^x-[a-z0-9][a-z0-9_-]{0,62}$/;
export const FUNCTION_PREFIX = "function.";
const IR_VERSION = 13n;
const OPSET = 26n;

// ONNX element types (TensorProto.DataType) of the dtypes of §6.1 (§7.9's table)
export const VALUE_TYPES = {
  bool: 9, int8: 3, int16: 5, int32: 6, int64: 7, uint8: 2, uint16: 4, uint32: 12, uint64: 13,
  float16: 10, bfloat16: 16, float32: 1, float64: 11,
};
const ELEMENT_TYPES = new Set(Object.values(VALUE_TYPES));
const BOOL = 9, INT32 = 6, INT64 = 7, FLOAT = 1, STRING = 8;
const WIDTH = { [INT32]: 32, [INT64]: 64 };
const MAX_KNOWN = 64n;

export const ALLOWED_OPS = new Set(`Abs Add And BitCast BitShift BitwiseAnd BitwiseNot BitwiseOr BitwiseXor Cast Ceil Clip
  Concat Constant Div Equal Exp Expand Flatten Floor Gather Gemm Greater GreaterOrEqual Identity Less LessOrEqual Log
  MatMul Max Min Mod Mul Neg Not Or Pow Reciprocal ReduceMax ReduceMean ReduceMin ReduceSum Reshape Round
  ScatterElements Shape Sign Slice Sqrt Squeeze Sub Sum Tanh Transpose Unsqueeze Where Xor`.split(/\s+/));

// AttributeProto.AttributeType
const A = { FLOAT: 1, INT: 2, STRING: 3, TENSOR: 4, GRAPH: 5, FLOATS: 6, INTS: 7, STRINGS: 8, TENSORS: 9, GRAPHS: 10,
  SPARSE_TENSOR: 11, SPARSE_TENSORS: 12, TYPE_PROTO: 13, TYPE_PROTOS: 14 };
const SUBGRAPH_ATTRIBUTES = new Set([A.GRAPH, A.GRAPHS, A.SPARSE_TENSOR, A.SPARSE_TENSORS, A.TYPE_PROTO, A.TYPE_PROTOS]);

const list = (x) => x || [];

// §7.8 `definition`: schemas/update-type-definition.schema.json; an error message, or null
export function definitionProblem(d) {
  if (!isPlainObject(d)) return "is not an object";
  for (const k of ["version", "inputs", "exact"]) if (!(k in d)) return `has no \`${k}\``;
  for (const k of Object.keys(d)) if (!["version", "inputs", "exact", "description"].includes(k)) return `has an unknown member '${k}'`;
  if (!isInteger(d.version) || d.version < 1) return "`version` is not an integer >= 1";
  if (!Array.isArray(d.inputs)) return "`inputs` is not an array";
  if (d.inputs.length > 16) return "`inputs` has more than 16 items";
  for (const i of d.inputs) {
    if (typeof i !== "string" || !/^[A-Za-z_][A-Za-z0-9_]{0,63}$/u.test(i) || i === "base" || i === "result") {
      return `has the input ${describe(i)}, which is not a name (or is base / result)`;
    }
  }
  if (new Set(d.inputs).size !== d.inputs.length) return "`inputs` repeats a name";
  if (typeof d.exact !== "boolean") return "`exact` is not a boolean";
  if ("description" in d && typeof d.description !== "string") return "`description` is not a string";
  return null;
}

function tensorBytes(t) {
  const n = list(t.float_data).length + list(t.int32_data).length + list(t.int64_data).length
    + list(t.double_data).length + list(t.uint64_data).length;
  return (t.raw_data ? t.raw_data.length : 0) + 8 * n + list(t.string_data).reduce((s, b) => s + b.length, 0);
}

function tensorsOf(model) {
  const graph = model.graph || {};
  const out = [...list(graph.initializer)];
  for (const node of list(graph.node)) {
    for (const a of list(node.attribute)) {
      if (a.type === A.TENSOR && a.t) out.push(a.t);
      else if (a.type === A.TENSORS) out.push(...list(a.tensors));
    }
  }
  return out;
}

const elemType = (valueInfo) => ((valueInfo.type || {}).tensor_type || {}).elem_type ?? 0;

// §7.8 checks 1-7 on one function: {model (null when refused), problems: [[code, message]]}
export function checkFunction(bytes, dtype, inputs, limits) {
  if (bytes.length > limits.maxFunctionBytes) return { model: null, problems: [["MD421", `${bytes.length} bytes (limit ${limits.maxFunctionBytes})`]] };
  let model;
  try {
    model = decodeModel(bytes);
  } catch (e) {
    if (e instanceof ProtobufError) return { model: null, problems: [["MD421", `not an ONNX model: ${e.message}`]] };
    throw e;
  }
  const graph = model.graph || {};
  const problems = [];
  const ir = model.ir_version ?? 0n;
  if (ir < 3n || ir > IR_VERSION) problems.push(["MD422", `IR version ${ir}; readers of this spec run 3 to ${IR_VERSION}`]);
  const opsets = list(model.opset_import);
  if (opsets.length !== 1 || !["", "ai.onnx"].includes(opsets[0].domain ?? "") || (opsets[0].version ?? 0n) !== OPSET) {
    problems.push(["MD422", `opset imports ${JSON.stringify(opsets.map((o) => [o.domain ?? "", String(o.version ?? 0n)]))}; only ai.onnx opset ${OPSET} is allowed`]);
  }
  if (list(model.functions).length || list(model.training_info).length || list(graph.sparse_initializer).length) {
    problems.push(["MD425", "local functions, training information or sparse initializers"]);
  }
  const nodes = list(graph.node);
  if (nodes.length > limits.maxFunctionNodes) problems.push(["MD426", `${nodes.length} nodes (limit ${limits.maxFunctionNodes})`]);
  for (const node of nodes) {
    const label = node.name || node.op_type || "";
    if (list(node.attribute).some((a) => SUBGRAPH_ATTRIBUTES.has(a.type ?? 0) || a.ref_attr_name)) {
      problems.push(["MD425", `node ${label} has a subgraph or reference attribute`]);
    }
    if (!["", "ai.onnx"].includes(node.domain ?? "") || !ALLOWED_OPS.has(node.op_type ?? "")) {
      problems.push(["MD423", `operator ${node.domain || "ai.onnx"}::${node.op_type ?? ""} is not allowed`]);
    }
  }
  const tensors = tensorsOf(model);
  if (tensors.some((t) => t.data_location === 1 || list(t.external_data).length)) problems.push(["MD424", "a tensor refers to external data"]);
  const total = tensors.reduce((s, t) => s + tensorBytes(t), 0);
  if (total > limits.maxFunctionConstantBytes) problems.push(["MD426", `${total} bytes of initializers and constants (limit ${limits.maxFunctionConstantBytes})`]);
  problems.push(...signatureProblems(graph, dtype, inputs), ...graphProblems(graph));
  return { model: problems.length ? null : model, problems };
}

function signatureProblems(graph, dtype, inputs) {
  const want = VALUE_TYPES[dtype];
  const names = list(graph.input).map((i) => i.name ?? "");
  const expected = ["base", ...inputs];
  const problems = [];
  if (names.length !== expected.length || names.some((n, i) => n !== expected[i])) {
    problems.push(["MD427", `inputs are ${JSON.stringify(names)}; the definition needs ${JSON.stringify(expected)}`]);
  } else if (elemType(graph.input[0]) !== want) problems.push(["MD427", `input \`base\` must be of element type ${want}`]);
  const outs = list(graph.output);
  if (outs.length !== 1 || (outs[0].name ?? "") !== "result" || elemType(outs[0]) !== want) {
    problems.push(["MD427", `the only output must be \`result\` of element type ${want}`]);
  }
  return problems;
}

function graphProblems(graph) {
  const defined = [...list(graph.input), ...list(graph.initializer)].map((x) => x.name ?? "");
  const seen = new Set(defined);
  if (seen.size !== defined.length || seen.has("")) return [["MD421", "a graph input or initializer name is empty or defined twice"]];
  for (const node of list(graph.node)) {
    const label = node.name || node.op_type || "";
    const missing = list(node.input).filter((i) => i && !seen.has(i));
    if (missing.length) return [["MD421", `node ${label} reads ${JSON.stringify(missing[0])} before it is defined`]];
    const outs = list(node.output);
    if (outs.length !== 1 || !outs[0] || seen.has(outs[0])) return [["MD421", `node ${label} must have one output, of a name not defined before`]];
    seen.add(outs[0]);
  }
  if (!seen.has("result")) return [["MD421", "no value is named `result`"]];
  return [];
}

// ---------------------------------------------------------------- §7.9's shape rules (check 8)

class ShapeError extends Error {}
const fail = (m) => {
  throw new ShapeError(m);
};
const prod = (s) => s.reduce((a, b) => a * b, 1n);
const extent = (s) => s.reduce((a, b) => a * (b > 1n ? b : 1n), 1n);
const wrap = (x, t) => BigInt.asIntN(WIDTH[t], x);
const fmt = (s) => `[${s.join(", ")}]`;

function make(t, shape, entries) {
  if (entries && t in WIDTH && shape.length <= 1 && prod(shape) <= MAX_KNOWN) return { t, shape, known: entries.map((e) => wrap(e, t)) };
  return { t, shape, known: null };
}

function tensorEntries(tensor) {
  const dims = list(tensor.dims);
  const t = tensor.data_type ?? 0;
  const n = prod(dims);
  if (!(t in WIDTH) || dims.length > 1 || n > MAX_KNOWN) return null;
  if (tensor.raw_data !== undefined) {
    const w = WIDTH[t] / 8;
    const raw = tensor.raw_data;
    if (BigInt(raw.length) !== n * BigInt(w)) fail(`tensor '${tensor.name ?? ""}' has ${raw.length} bytes of raw data for ${n} elements`);
    const dv = new DataView(raw.buffer, raw.byteOffset, raw.length);
    return Array.from({ length: Number(n) }, (_, i) => (w === 8 ? dv.getBigInt64(i * 8, true) : BigInt(dv.getInt32(i * 4, true))));
  }
  const data = t === INT64 ? list(tensor.int64_data) : list(tensor.int32_data).map(BigInt);
  if (BigInt(data.length) !== n) fail(`tensor '${tensor.name ?? ""}' has ${data.length} entries for ${n} elements`);
  return data;
}

function tensorValue(tensor) {
  const dims = list(tensor.dims);
  if (dims.some((d) => d < 0n)) fail(`tensor '${tensor.name ?? ""}' has a negative dimension`);
  return make(tensor.data_type ?? 0, dims, tensorEntries(tensor));
}

function attrs(node) {
  const m = new Map();
  for (const a of list(node.attribute)) m.set(a.name ?? "", a);
  return m;
}

function intAttr(node, name, dflt) {
  const a = attrs(node).get(name);
  if (a === undefined) return dflt;
  if ((a.type ?? 0) !== A.INT) fail(`attribute '${name}' of ${node.op_type} is not an int`);
  return a.i ?? 0n;
}

function axis(a, rank, what) {
  const r = BigInt(rank);
  if (a < -r || a >= r) fail(`${what}: axis ${a} is outside [-${r}, ${r - 1n}]`);
  return Number(a < 0n ? a + r : a);
}

export function broadcast(...shapes) {
  const rank = Math.max(...shapes.map((s) => s.length));
  const out = [];
  for (let i = 0; i < rank; i++) {
    const dims = new Set();
    for (const s of shapes) {
      const j = i - rank + s.length;
      if (j >= 0 && s[j] !== 1n) dims.add(s[j]);
    }
    if (dims.size > 1) fail(`shapes ${shapes.map(fmt).join(", ")} do not broadcast`);
    out.push(dims.size ? [...dims][0] : 1n);
  }
  return out;
}

function broadcastKnown(values, fn) {
  if (values.some((v) => v.known === null)) return null;
  const n = values.reduce((m, v) => (prod(v.shape) > m ? prod(v.shape) : m), 0n);
  if (!values.every((v) => BigInt(v.known.length) === 1n || BigInt(v.known.length) === n)) return null;
  return Array.from({ length: Number(n) }, (_, i) => fn(...values.map((v) => v.known[v.known.length > 1 ? i : 0])));
}

function needsKnown(v, what, limits) {
  if (v.known === null || v.shape.length !== 1) fail(`${what} is not a known 1-D value (a constant, or computed from constants and shapes)`);
  if (v.known.length > limits.maxRank) fail(`${what} has ${v.known.length} entries (rank limit ${limits.maxRank})`);
  return v.known;
}

const BROADCAST = new Set("Add And BitShift BitwiseAnd BitwiseOr BitwiseXor Div Equal Greater GreaterOrEqual Less LessOrEqual Max Min Mod Mul Or Pow Sub Sum Xor Where".split(" "));
const COMPARISONS = new Set("Equal Greater GreaterOrEqual Less LessOrEqual".split(" "));
const UNARY = new Set("Abs BitwiseNot Ceil Exp Floor Identity Log Neg Not Reciprocal Round Sign Sqrt Tanh".split(" "));
const REDUCE = new Set("ReduceMax ReduceMean ReduceMin ReduceSum".split(" "));
const MANY = 2 ** 31;
const ARITY = {
  ...Object.fromEntries([...BROADCAST].map((op) => [op, [2, 2]])), Max: [1, MANY], Min: [1, MANY], Sum: [1, MANY], Where: [3, 3],
  ...Object.fromEntries([...UNARY].map((op) => [op, [1, 1]])), Cast: [1, 1], BitCast: [1, 1], Clip: [1, 3], Concat: [1, MANY],
  Constant: [0, 0], Expand: [2, 2], Flatten: [1, 1], Gather: [2, 2], Gemm: [2, 3], MatMul: [2, 2],
  ...Object.fromEntries([...REDUCE].map((op) => [op, [1, 2]])), Reshape: [2, 2], ScatterElements: [3, 3], Shape: [1, 1],
  Slice: [3, 5], Squeeze: [1, 2], Transpose: [1, 1], Unsqueeze: [2, 2],
};
const FOLD = { Add: (a, b) => a + b, Sub: (a, b) => a - b, Mul: (a, b) => a * b };

function constant(node) {
  const as = list(node.attribute);
  if (as.length !== 1) fail("a Constant has exactly one value attribute");
  const a = as[0];
  const ty = a.type ?? 0;
  const name = a.name ?? "";
  if (name === "value" && ty === A.TENSOR) return tensorValue(a.t || {});
  if (name === "value_int" && ty === A.INT) return make(INT64, [], [a.i ?? 0n]);
  if (name === "value_ints" && ty === A.INTS) return make(INT64, [BigInt(list(a.ints).length)], list(a.ints));
  if (name === "value_float" && ty === A.FLOAT) return make(FLOAT, [], null);
  if (name === "value_floats" && ty === A.FLOATS) return make(FLOAT, [BigInt(list(a.floats).length)], null);
  if (name === "value_string" && ty === A.STRING) return make(STRING, [], null);
  if (name === "value_strings" && ty === A.STRINGS) return make(STRING, [BigInt(list(a.strings).length)], null);
  return fail(`a Constant's attribute '${name}' is not one of value, value_int(s), value_float(s), value_string(s)`);
}

function sameType(node, values) {
  const ts = new Set(values.map((v) => v.t));
  if (ts.size !== 1) fail(`the inputs of ${node.op_type} have different element types ${[...ts].sort((a, b) => a - b).join(", ")}`);
  return values[0].t;
}

const clamp = (x, lo, hi) => (x < lo ? lo : x > hi ? hi : x);

function slice(x, args, limits) {
  const starts = needsKnown(args[0], "Slice starts", limits);
  const ends = needsKnown(args[1], "Slice ends", limits);
  const rank = x.shape.length;
  const axesIn = args[2] ? needsKnown(args[2], "Slice axes", limits) : starts.map((_, i) => BigInt(i));
  const steps = args[3] ? needsKnown(args[3], "Slice steps", limits) : starts.map(() => 1n);
  if (!(starts.length === ends.length && ends.length === axesIn.length && axesIn.length === steps.length)) fail("Slice: starts, ends, axes and steps differ in length");
  const axes = axesIn.map((a) => axis(a, rank, "Slice"));
  if (new Set(axes).size !== axes.length) fail("Slice: an axis is repeated");
  const shape = [...x.shape];
  let pick0 = null;
  axes.forEach((ax, k) => {
    const step = steps[k];
    if (step === 0n) fail("Slice: a step of 0");
    const dim = shape[ax];
    let start = starts[k] < 0n ? starts[k] + dim : starts[k];
    let end = ends[k] < 0n ? ends[k] + dim : ends[k];
    let len;
    if (step > 0n) {
      start = clamp(start, 0n, dim);
      end = clamp(end, 0n, dim);
      len = end > start ? (end - start + step - 1n) / step : 0n;
    } else {
      start = clamp(start, 0n, dim - 1n);
      end = clamp(end, -1n, dim - 1n);
      len = start > end ? (start - end - step - 1n) / -step : 0n;
    }
    shape[ax] = len;
    if (ax === 0) pick0 = { start, step, len };
  });
  let entries = null;
  if (x.known !== null && rank === 1) {
    const p = pick0 || { start: 0n, step: 1n, len: shape[0] };
    entries = Array.from({ length: Number(p.len) }, (_, i) => x.known[Number(p.start + BigInt(i) * p.step)]);
  }
  return make(x.t, shape, entries);
}

function reshape(node, x, target) {
  const allowzero = intAttr(node, "allowzero", 0n);
  if (target.some((d) => d < -1n) || target.filter((d) => d === -1n).length > 1) fail(`Reshape to ${fmt(target)}: an entry below -1, or more than one -1`);
  if (allowzero && target.includes(0n) && target.includes(-1n)) fail("Reshape with allowzero: both 0 and -1");
  const out = target.map((d, i) => {
    if (d === 0n && !allowzero) {
      if (i >= x.shape.length) fail(`Reshape: entry ${i} copies a dimension the input does not have`);
      return x.shape[i];
    }
    return d;
  });
  const total = prod(x.shape);
  const m = out.indexOf(-1n);
  if (m >= 0) {
    const rest = prod(out.filter((d) => d !== -1n));
    if (rest === 0n || total % rest) fail(`Reshape of ${fmt(x.shape)} to ${fmt(target)}: -1 cannot be inferred`);
    out[m] = total / rest;
  }
  if (prod(out) !== total) fail(`Reshape of ${fmt(x.shape)} (${total} elements) to ${fmt(out)}`);
  return out;
}

function matmul(a, b) {
  if (!a.length || !b.length) fail("MatMul of a scalar");
  const a2 = a.length === 1 ? [1n, ...a] : a;
  const b2 = b.length === 1 ? [...b, 1n] : b;
  if (a2[a2.length - 1] !== b2[b2.length - 2]) fail(`MatMul of ${fmt(a)} and ${fmt(b)}: inner dimensions differ`);
  let out = [...broadcast(a2.slice(0, -2), b2.slice(0, -2)), a2[a2.length - 2], b2[b2.length - 1]];
  if (a.length === 1) out = [...out.slice(0, -2), out[out.length - 1]];
  if (b.length === 1) out = out.slice(0, -1);
  return out;
}

function inferNode(node, args, limits) {
  const op = node.op_type;
  const [fewest, most] = ARITY[op];
  if (args.length < fewest || args.length > most || args.slice(0, fewest).some((a) => a === null)) fail(`${op} takes ${fewest} to ${most} inputs, not ${args.length}`);
  const given = args.filter((a) => a !== null);
  const x = args[0];
  if (BROADCAST.has(op)) {
    let t;
    if (op === "Where") {
      if (args[0].t !== BOOL) fail("Where: the condition is not bool");
      t = sameType(node, given.slice(1));
    } else if (op === "Pow") t = given[0].t;
    else t = sameType(node, given);
    const shape = broadcast(...given.map((v) => v.shape));
    if (COMPARISONS.has(op)) t = BOOL;
    const known = op in FOLD && t in WIDTH ? broadcastKnown(given, FOLD[op]) : null;
    return make(t, shape, known);
  }
  const rank = x.shape.length;
  if (UNARY.has(op)) {
    const known = op === "Identity" ? x.known : op === "Neg" && x.known !== null ? x.known.map((e) => -e) : null;
    return make(op === "Not" ? BOOL : x.t, x.shape, known);
  }
  if (op === "Cast" || op === "BitCast") {
    const to = intAttr(node, "to", null);
    if (to === null || !ELEMENT_TYPES.has(Number(to)) || BigInt(Number(to)) !== to) fail(`${op}: \`to\` is not one of the element types of §7.9's table`);
    return make(Number(to), x.shape, op === "Cast" ? x.known : null);
  }
  if (op === "Clip") return make(x.t, x.shape, null);
  if (op === "Concat") {
    const a = intAttr(node, "axis", null);
    if (a === null || rank === 0) fail("Concat needs an axis and inputs of rank >= 1");
    const ax = axis(a, rank, "Concat");
    const t = sameType(node, given);
    const shape = [...x.shape];
    for (const v of given.slice(1)) {
      if (v.shape.length !== rank || v.shape.some((d, i) => i !== ax && d !== shape[i])) fail(`Concat of ${fmt(x.shape)} and ${fmt(v.shape)} along axis ${ax}`);
      shape[ax] += v.shape[ax];
    }
    const known = given.every((v) => v.known !== null) && rank === 1 ? given.flatMap((v) => v.known) : null;
    return make(t, shape, known);
  }
  if (op === "Expand") {
    const target = needsKnown(args[1], "Expand's shape", limits);
    if (target.some((d) => d < 0n)) fail(`Expand to ${fmt(target)}: a negative dimension`);
    return make(x.t, broadcast(x.shape, target), null);
  }
  if (op === "Flatten") {
    let a = intAttr(node, "axis", 1n);
    const r = BigInt(rank);
    if (a < -r || a > r) fail(`Flatten: axis ${a} is outside [-${r}, ${r}]`);
    a = Number(a < 0n ? a + r : a);
    return make(x.t, [prod(x.shape.slice(0, a)), prod(x.shape.slice(a))], null);
  }
  if (op === "Gather") {
    const ind = args[1];
    if (rank === 0) fail("Gather from a scalar");
    const ax = axis(intAttr(node, "axis", 0n), rank, "Gather");
    const shape = [...x.shape.slice(0, ax), ...ind.shape, ...x.shape.slice(ax + 1)];
    let entries = null;
    if (x.known !== null && ind.known !== null && rank === 1) {
      const n = BigInt(x.known.length);
      if (ind.known.some((i) => i < -n || i >= n)) fail(`Gather: an index outside [-${n}, ${n - 1n}]`);
      entries = ind.known.map((i) => x.known[Number(i < 0n ? i + n : i)]);
    }
    return make(x.t, shape, entries);
  }
  if (op === "Gemm") {
    const [a, b] = args;
    if (a.shape.length !== 2 || b.shape.length !== 2) fail("Gemm of inputs that are not 2-D");
    const [m, k] = intAttr(node, "transA", 0n) ? [...a.shape].reverse() : a.shape;
    const [k2, n] = intAttr(node, "transB", 0n) ? [...b.shape].reverse() : b.shape;
    if (k !== k2) fail(`Gemm: inner dimensions ${k} and ${k2} differ`);
    const t = sameType(node, given);
    if (args.length === 3 && args[2] !== null) {
      const c = broadcast(args[2].shape, [m, n]);
      if (c.length !== 2 || c[0] !== m || c[1] !== n) fail(`Gemm: C of shape ${fmt(args[2].shape)} does not broadcast to [${m}, ${n}]`);
    }
    return make(t, [m, n], null);
  }
  if (op === "MatMul") {
    const t = sameType(node, given);
    return make(t, matmul(x.shape, args[1].shape), null);
  }
  if (REDUCE.has(op)) {
    const keepdims = intAttr(node, "keepdims", 1n);
    const noop = intAttr(node, "noop_with_empty_axes", 0n);
    let axes = args.length > 1 && args[1] !== null ? needsKnown(args[1], `${op}'s axes`, limits).map((a) => axis(a, rank, op)) : [];
    if (new Set(axes).size !== axes.length) fail(`${op}: an axis is repeated`);
    if (!axes.length) {
      if (noop) return make(x.t, x.shape, null);
      axes = x.shape.map((_, i) => i);
    }
    const shape = keepdims ? x.shape.map((d, i) => (axes.includes(i) ? 1n : d)) : x.shape.filter((_, i) => !axes.includes(i));
    return make(x.t, shape, null);
  }
  if (op === "Reshape") {
    const target = needsKnown(args[1], "Reshape's shape", limits);
    return make(x.t, reshape(node, x, target), x.known);
  }
  if (op === "ScatterElements") {
    const [, ind, upd] = args;
    if (rank) axis(intAttr(node, "axis", 0n), rank, "ScatterElements");
    if (rank === 0 || ind.shape.length !== rank || ind.shape.length !== upd.shape.length || ind.shape.some((d, i) => d !== upd.shape[i])) {
      fail("ScatterElements: indices and updates have the data's rank and one shape");
    }
    if (upd.t !== x.t) fail("ScatterElements: updates of another element type");
    return make(x.t, x.shape, null);
  }
  if (op === "Shape") {
    const r = BigInt(rank);
    let start = intAttr(node, "start", 0n);
    let end = intAttr(node, "end", r);
    start = clamp(start < 0n ? start + r : start, 0n, r);
    end = clamp(end < 0n ? end + r : end, 0n, r);
    const dims = x.shape.slice(Number(start), Number(end));
    return make(INT64, [BigInt(dims.length)], dims);
  }
  if (op === "Slice") return slice(x, [...args.slice(1), null, null, null, null].slice(0, 4), limits);
  if (op === "Squeeze") {
    let axes;
    if (args.length > 1 && args[1] !== null) {
      axes = needsKnown(args[1], "Squeeze's axes", limits).map((a) => axis(a, rank, "Squeeze"));
      if (new Set(axes).size !== axes.length || axes.some((a) => x.shape[a] !== 1n)) fail(`Squeeze of ${fmt(x.shape)} at axes ${fmt(axes)}`);
    } else axes = x.shape.map((d, i) => (d === 1n ? i : -1)).filter((i) => i >= 0);
    return make(x.t, x.shape.filter((_, i) => !axes.includes(i)), x.known);
  }
  if (op === "Unsqueeze") {
    const axesIn = needsKnown(args[1], "Unsqueeze's axes", limits);
    const outRank = rank + axesIn.length;
    const axes = new Set(axesIn.map((a) => axis(a, outRank, "Unsqueeze")));
    if (axes.size !== axesIn.length) fail("Unsqueeze: an axis is repeated");
    let j = 0;
    const shape = Array.from({ length: outRank }, (_, i) => (axes.has(i) ? 1n : x.shape[j++]));
    return make(x.t, shape, x.known);
  }
  if (op === "Transpose") {
    const a = attrs(node).get("perm");
    const perm = a !== undefined ? list(a.ints) : x.shape.map((_, i) => BigInt(rank - 1 - i));
    const sorted = [...perm].sort((p, q) => (p < q ? -1 : p > q ? 1 : 0));
    if (sorted.length !== rank || sorted.some((p, i) => p !== BigInt(i))) fail(`Transpose: perm ${fmt(perm)} is not a permutation of the ${rank} axes`);
    return make(x.t, perm.map((p) => x.shape[Number(p)]), null);
  }
  return fail(`no shape rule for ${op}`);
}

// §7.8 check 8 for one parameter: `inputs` maps each graph input to {t, shape (BigInt[])};
// `result` is the {t, shape} it must have. An error message, or null.
export function checkGraph(graph, inputs, result, limits) {
  const values = new Map(Object.entries(inputs).map(([k, v]) => [k, { t: v.t, shape: v.shape, known: null }]));
  const bounded = (name, v) => {
    if (v.shape.length > limits.maxRank) fail(`'${name}' would have rank ${v.shape.length} (limit ${limits.maxRank})`);
    const e = extent(v.shape);
    if (e > limits.maxElements) fail(`'${name}' would hold ${e} elements, counting a dimension of 0 as 1 (limit ${limits.maxElements})`);
    return v;
  };
  try {
    for (const t of list(graph.initializer)) values.set(t.name ?? "", bounded(t.name ?? "", tensorValue(t)));
    for (const node of list(graph.node)) {
      const label = node.name || node.op_type;
      const args = list(node.input).map((i) => (i ? values.get(i) : null));
      let out;
      try {
        out = node.op_type === "Constant" ? constant(node) : inferNode(node, args, limits);
      } catch (e) {
        if (e instanceof ShapeError) fail(`node ${label}: ${e.message}`);
        throw e;
      }
      values.set(node.output[0], bounded(node.output[0], out));
    }
  } catch (e) {
    if (e instanceof ShapeError) return e.message;
    throw e;
  }
  const got = values.get("result");
  if (got.t !== result.t || got.shape.length !== result.shape.length || got.shape.some((d, i) => d !== result.shape[i])) {
    return `the result would be of element type ${got.t} and shape ${fmt(got.shape)}, not ${result.t} and ${fmt(result.shape)}`;
  }
  return null;
}

// HDF5 storage {cls, size, signed} -> the ONNX element type it feeds (§7.8 check 7)
function storageType(s) {
  if (s.cls === "float") return { 2: 10, 4: 1, 8: 11 }[s.size];
  return (s.signed ? { 1: 3, 2: 5, 4: 6, 8: 7 } : { 1: 2, 2: 4, 4: 12, 8: 13 })[s.size];
}

export function canFeed(storage, declared) {
  if (storage.cls === "int" && !storage.signed && storage.size === 2 && (declared === 10 || declared === 16)) return true;
  return storageType(storage) === declared;
}

// §7.8 checks 7 (data against declared inputs) and 8 for one parameter: [[code, message]]
export function checkShapes(model, shape, datasets, limits) {
  const graph = model.graph;
  const ins = list(graph.input);
  for (const value of ins.slice(1)) {
    const { storage } = datasets[value.name];
    if (!canFeed(storage, elemType(value))) return [["MD427", `dataset '${value.name}' cannot feed an input of element type ${elemType(value)}`]];
  }
  const shapes = [shape, ...ins.slice(1).map((i) => datasets[i.name].shape)];
  for (let k = 0; k < ins.length; k++) {
    const tt = (ins[k].type || {}).tensor_type || {};
    if (tt.shape === undefined) continue;
    const dims = list(tt.shape.dim);
    const data = shapes[k];
    if (dims.length !== data.length || dims.some((d, i) => d.dim_value !== undefined && d.dim_value !== data[i])) {
      return [["MD427", `input '${ins[k].name}' is declared with ${dims.length} dimensions, but the data has shape ${fmt(data)}`]];
    }
  }
  const inputs = Object.fromEntries(ins.map((v, k) => [v.name, { t: elemType(v), shape: shapes[k] }]));
  const problem = checkGraph(graph, inputs, { t: elemType(graph.output[0]), shape }, limits);
  return problem ? [["MD428", problem]] : [];
}

// ---------------------------------------------------------------- running (§7.8: "the result is the function's output")

// onnxruntime-node has no bfloat16 tensors: a function with bfloat16 inputs or output is wrapped so
// that they travel as uint16 bit patterns (BitCast, exact both ways).
function wrapBfloat16(model) {
  const graph = model.graph;
  const used = new Set([...list(graph.input), ...list(graph.output), ...list(graph.initializer)].map((v) => v.name)
    .concat(list(graph.node).flatMap((n) => [...list(n.input), ...list(n.output)])));
  const fresh = (base) => {
    let name = `${base}__bits`;
    while (used.has(name)) name += "_";
    used.add(name);
    return name;
  };
  const pre = [];
  const post = [];
  const feeds = {};
  const inputs = list(graph.input).map((v) => {
    if (elemType(v) !== 16) return v;
    const bits = fresh(v.name);
    feeds[v.name] = bits;
    pre.push({ input: [bits], output: [v.name], op_type: "BitCast", attribute: [{ name: "to", type: A.INT, i: 16n }] });
    return { name: bits, type: { tensor_type: { elem_type: 4, shape: v.type.tensor_type.shape } } };
  });
  let output = graph.output[0];
  let resultName = "result";
  if (elemType(output) === 16) {
    resultName = fresh("result");
    post.push({ input: ["result"], output: [resultName], op_type: "BitCast", attribute: [{ name: "to", type: A.INT, i: 4n }] });
    output = { name: resultName, type: { tensor_type: { elem_type: 4 } } };
  }
  const wrapped = { ...model, graph: { ...graph, input: inputs, output: [output], node: [...pre, ...list(graph.node), ...post] } };
  return { bytes: encodeMessage(wrapped), feeds, resultName };
}

let ort = null;
const sessions = new Map();

const ORT_TYPES = { 9: ["bool", Uint8Array], 3: ["int8", Int8Array], 5: ["int16", Int16Array], 6: ["int32", Int32Array],
  7: ["int64", BigInt64Array], 2: ["uint8", Uint8Array], 4: ["uint16", Uint16Array], 12: ["uint32", Uint32Array],
  13: ["uint64", BigUint64Array], 10: ["float16", Uint16Array], 16: ["uint16", Uint16Array], 1: ["float32", Float32Array],
  11: ["float64", Float64Array] };

// Runs a checked function: `inputs` maps each graph input to the bytes (a Buffer) of its data and its
// shape (numbers); returns the bytes of `result`.
export async function runFunction(key, model, inputs) {
  if (ort === null) ort = (await import("onnxruntime-node")).default;
  let s = sessions.get(key);
  if (!s) {
    const { bytes, feeds, resultName } = wrapBfloat16(model);
    s = { session: await ort.InferenceSession.create(bytes, { graphOptimizationLevel: "disabled", intraOpNumThreads: 1 }), feeds, resultName };
    sessions.set(key, s);
  }
  const feed = {};
  for (const v of list(model.graph.input)) {
    const [type, Arr] = ORT_TYPES[elemType(v)];
    const { data, shape } = inputs[v.name];
    const copy = new Uint8Array(data); // aligned
    feed[s.feeds[v.name] || v.name] = new ort.Tensor(type, new Arr(copy.buffer, 0, copy.length / Arr.BYTES_PER_ELEMENT), shape);
  }
  const out = (await s.session.run(feed))[s.resultName];
  const d = out.data;
  return Buffer.from(d.buffer, d.byteOffset, d.byteLength);
}
