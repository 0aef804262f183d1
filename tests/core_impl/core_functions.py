"""Embedded update types for the core implementation (SPEC.md §7.8 checks 1-8, §7.9's shape rules).

Written from SPEC.md alone, like mdiff_core.py, and like it does not import mdiff: the `onnx` package
parses a function (protobuf's own parser, check 1), the shape rules of §7.9 are applied here node by
node, and onnxruntime runs a function that passed every check.
"""

from __future__ import annotations

import math

import numpy as np

IR_RANGE = (3, 13)
OPSET = 26
ALLOWED = frozenset("""
    Abs Add And BitCast BitShift BitwiseAnd BitwiseNot BitwiseOr BitwiseXor Cast Ceil Clip Concat Constant
    Div Equal Exp Expand Flatten Floor Gather Gemm Greater GreaterOrEqual Identity Less LessOrEqual Log MatMul
    Max Min Mod Mul Neg Not Or Pow Reciprocal ReduceMax ReduceMean ReduceMin ReduceSum Reshape Round
    ScatterElements Shape Sign Slice Sqrt Squeeze Sub Sum Tanh Transpose Unsqueeze Where Xor""".split())
# ONNX element types (TensorProto.DataType numbers, fixed by the ONNX standard) of the dtypes of §6.1
ELEM = {"bool": 9, "int8": 3, "int16": 5, "int32": 6, "int64": 7, "uint8": 2, "uint16": 4, "uint32": 12,
        "uint64": 13, "float16": 10, "bfloat16": 16, "float32": 1, "float64": 11}
FLOAT, INT32, INT64, STRING, BOOL = 1, 6, 7, 8, 9
NUMPY_ELEM = {np.dtype(k): v for k, v in {"<u1": 2, "<i1": 3, "<u2": 4, "<i2": 5, "<i4": 6, "<i8": 7, "<u4": 12,
                                           "<u8": 13, "<f4": 1, "<f8": 11, "<f2": 10}.items()}
KNOWN_MAX = 64
# attribute types (AttributeProto.AttributeType)
A_FLOAT, A_INT, A_STRING, A_TENSOR, A_GRAPH, A_FLOATS, A_INTS, A_STRINGS, A_TENSORS, A_GRAPHS = range(1, 11)
A_SPARSE, A_SPARSES, A_TYPE, A_TYPES = 11, 12, 13, 14


def _tensor_bytes(t):
    return (len(t.raw_data) + 8 * (len(t.float_data) + len(t.int32_data) + len(t.int64_data) + len(t.double_data)
                                   + len(t.uint64_data)) + sum(len(s) for s in t.string_data))


def check_function(data, dtype, inputs, limits):
    """(model, []) when checks 1-6 and the first two rules of check 7 pass, else (None, [(code, message)])."""
    import onnx
    if len(data) > limits.get("max_function_bytes", 2**20):
        return None, [("MD421", "over the size limit")]
    model = onnx.ModelProto()
    try:
        model.ParseFromString(bytes(data))
    except Exception as exc:  # DecodeError, or the nesting limit
        return None, [("MD421", f"not an ONNX ModelProto: {exc}")]
    g = model.graph
    out = []
    if not IR_RANGE[0] <= model.ir_version <= IR_RANGE[1]:
        out.append(("MD422", "IR version"))
    if [(o.domain, o.version) for o in model.opset_import] not in ([("", OPSET)], [("ai.onnx", OPSET)]):
        out.append(("MD422", "opset"))
    if any(n.domain not in ("", "ai.onnx") or n.op_type not in ALLOWED for n in g.node):
        out.append(("MD423", "operator"))
    tensors = list(g.initializer) + [t for n in g.node for a in n.attribute
                                     for t in ([a.t] if a.type == A_TENSOR else list(a.tensors) if a.type == A_TENSORS else [])]
    if any(t.data_location == 1 or len(t.external_data) for t in tensors):
        out.append(("MD424", "external data"))
    if (model.functions or model.training_info or g.sparse_initializer
            or any(a.type in (A_GRAPH, A_GRAPHS, A_SPARSE, A_SPARSES, A_TYPE, A_TYPES) or a.ref_attr_name
                   for n in g.node for a in n.attribute)):
        out.append(("MD425", "subgraph, reference attribute, local function, training information or sparse tensor"))
    if (len(g.node) > limits.get("max_function_nodes", 256)
            or sum(_tensor_bytes(t) for t in tensors) > limits.get("max_function_constant_bytes", 2**20)):
        out.append(("MD426", "too many nodes or constant bytes"))
    names = [i.name for i in g.input]
    if (names != ["base", *inputs] or g.input[0].type.tensor_type.elem_type != ELEM[dtype]
            or [o.name for o in g.output] != ["result"] or g.output[0].type.tensor_type.elem_type != ELEM[dtype]):
        out.append(("MD427", "inputs or output"))
    defined = names + [t.name for t in g.initializer]
    seen, formed = set(defined), len(set(defined)) == len(defined) and "" not in defined
    for n in g.node if formed else []:
        if any(i and i not in seen for i in n.input) or len(n.output) != 1 or not n.output[0] or n.output[0] in seen:
            formed = False
            break
        seen.add(n.output[0])
    if not formed or "result" not in seen:
        out.append(("MD421", "the graph is not well formed"))
    return (None if out else model), out


def check_parameter(model, dtype, shape, datasets, limits):
    """The rest of check 7 and check 8 for one parameter: None, or (code, message) of the first failure.
    ``datasets``: input name -> (shape, numpy storage dtype)."""
    g = model.graph
    given = {"base": (tuple(shape), ELEM[dtype])}
    for v in g.input[1:]:
        dshape, storage = datasets[v.name]
        declared = v.type.tensor_type.elem_type
        feeds = NUMPY_ELEM.get(np.dtype(storage)) == declared or (np.dtype(storage) == np.dtype("<u2") and declared in (10, 16))
        if not feeds:
            return ("MD427", f"dataset {v.name} cannot feed its input")
        given[v.name] = (tuple(dshape), declared)
    for v in g.input:
        tt = v.type.tensor_type
        dims = given[v.name][0]
        if tt.HasField("shape") and (len(tt.shape.dim) != len(dims) or any(
                d.HasField("dim_value") and d.dim_value != n for d, n in zip(tt.shape.dim, dims))):
            return ("MD427", f"input {v.name} is declared another shape")
    try:
        Shapes(limits).run(g, given, (tuple(shape), ELEM[dtype]))
    except ShapeError as exc:
        return ("MD428", str(exc))
    return None


class ShapeError(Exception):
    pass


def _wrap(x, t):
    bits = 32 if t == INT32 else 64
    return ((x + (1 << (bits - 1))) % (1 << bits)) - (1 << (bits - 1))


class V:
    """A value: ONNX element type, shape, and its entries when it is known (§7.9)."""

    def __init__(self, t, shape, known=None):
        self.t, self.shape = t, tuple(shape)
        ok = known is not None and t in (INT32, INT64) and len(self.shape) <= 1 and math.prod(self.shape) <= KNOWN_MAX
        self.known = tuple(_wrap(int(k), t) for k in known) if ok else None


def _entries(t):
    """The entries of an INT32/INT64 initializer or Constant tensor of rank <= 1 and at most 64 of them, or None
    (not a known value); its raw_data must be exactly those entries, else its int32_data/int64_data (§7.9)."""
    count = math.prod(t.dims)
    if t.data_type not in (INT32, INT64) or len(t.dims) > 1 or count > KNOWN_MAX:
        return None
    little = np.dtype("<i4" if t.data_type == INT32 else "<i8")
    listed = t.int32_data if t.data_type == INT32 else t.int64_data
    values = (np.frombuffer(t.raw_data, little) if t.HasField("raw_data") and len(t.raw_data) == count * little.itemsize
              else None if t.HasField("raw_data") else np.array(listed, dtype=np.int64) if len(listed) == count else None)
    if values is None:
        raise ShapeError(f"tensor {t.name} does not hold exactly its {count} entries")
    return [int(v) for v in values]


def _tensor(t):
    if any(d < 0 for d in t.dims):
        raise ShapeError(f"tensor {t.name} has a negative dimension")
    return V(t.data_type, t.dims, _entries(t))


def broadcast(*shapes):
    """numpy's broadcasting of ``shapes`` (ONNX's multidirectional broadcasting is numpy's)."""
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*shapes))
    except ValueError:
        raise ShapeError(f"shapes {shapes} do not broadcast") from None


def _axis(a, r):
    if not -r <= a < r:
        raise ShapeError(f"axis {a} out of range for rank {r}")
    return a + r if a < 0 else a


def _axes(values, r):
    out = [_axis(a, r) for a in values]
    if len(set(out)) != len(out):
        raise ShapeError("a repeated axis")
    return out


class Shapes:
    def __init__(self, limits):
        self.rank = limits.get("max_rank", 32)
        self.elements = limits.get("max_elements", 2**36)

    def bound(self, name, v):
        if len(v.shape) > self.rank or math.prod(max(d, 1) for d in v.shape) > self.elements:
            raise ShapeError(f"value {name} of shape {list(v.shape)} is past the limits")
        return v

    def run(self, g, given, want):
        env = {}
        for name, (shape, t) in given.items():
            env[name] = self.bound(name, V(t, shape))
        for t in g.initializer:
            env[t.name] = self.bound(t.name, _tensor(t))
        for n in g.node:
            try:
                v = self.node(n, [env[i] if i else None for i in n.input])
            except (KeyError, IndexError, ValueError, TypeError, ZeroDivisionError, OverflowError) as exc:
                raise ShapeError(f"{n.op_type}: {exc!r}") from None
            env[n.output[0]] = self.bound(n.output[0], v)
        res = env["result"]
        if res.shape != want[0] or res.t != want[1]:
            raise ShapeError("`result` does not have the parameter's shape and element type")

    def shape_input(self, v):
        if v is None or v.known is None or len(v.shape) != 1 or len(v.known) > self.rank:
            raise ShapeError("a shape or axes input is not a known 1-D value within the rank limit")
        return list(v.known)

    def node(self, n, ins):
        op = n.op_type
        attrs = {a.name: a for a in n.attribute}

        def count(lo, hi=None):
            if not lo <= len(ins) <= (hi if hi is not None else 1 << 30):
                raise ShapeError(f"{op} takes {lo} to {hi} inputs")
            if any(v is None for v in ins[:lo]):
                raise ShapeError(f"{op}: a required input is omitted")

        def iattr(name, default):
            a = attrs.get(name)
            if a is None:
                return default
            if a.type != A_INT:
                raise ShapeError(f"attribute {name} is not an int")
            return a.i

        def same_type(vs):
            if len({v.t for v in vs if v is not None}) != 1:
                raise ShapeError(f"{op}: inputs of more than one element type")

        def fold(vs, fn):
            if any(v.known is None for v in vs):
                return None
            m = max(len(v.known) for v in vs)
            if not all(len(v.known) in (1, m) for v in vs):
                return None
            return [fn(*[v.known[i if len(v.known) > 1 else 0] for v in vs]) for i in range(m)]

        x = ins[0] if ins else None
        if op in ("Add", "Sub", "Mul", "Div", "Mod", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "And", "Or", "Xor"):
            count(2, 2)
            same_type(ins)
            shape = broadcast(ins[0].shape, ins[1].shape)
            fn = {"Add": lambda a, b: a + b, "Sub": lambda a, b: a - b, "Mul": lambda a, b: a * b}.get(op)
            return V(x.t, shape, fold(ins, fn) if fn else None)
        if op in ("Max", "Min", "Sum"):
            count(1)
            same_type(ins)
            return V(x.t, broadcast(*[v.shape for v in ins]))
        if op == "Pow":
            count(2, 2)
            return V(x.t, broadcast(ins[0].shape, ins[1].shape))
        if op in ("Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual"):
            count(2, 2)
            same_type(ins)
            return V(BOOL, broadcast(ins[0].shape, ins[1].shape))
        if op == "Where":
            count(3, 3)
            if x.t != BOOL:
                raise ShapeError("Where's condition is not BOOL")
            same_type(ins[1:])
            return V(ins[1].t, broadcast(*[v.shape for v in ins]))
        if op in ("Abs", "BitwiseNot", "Ceil", "Exp", "Floor", "Identity", "Log", "Neg", "Reciprocal", "Round",
                  "Sign", "Sqrt", "Tanh"):
            count(1, 1)
            known = x.known if op == "Identity" else [-k for k in x.known] if op == "Neg" and x.known is not None else None
            return V(x.t, x.shape, known)
        if op == "Not":
            count(1, 1)
            return V(BOOL, x.shape)
        if op in ("Cast", "BitCast"):
            count(1, 1)
            to = iattr("to", None)
            if to not in ELEM.values():
                raise ShapeError(f"{op} to an element type outside §7.9")
            return V(to, x.shape, x.known if op == "Cast" and to in (INT32, INT64) else None)
        if op == "Clip":
            count(1, 3)
            return V(x.t, x.shape)
        if op == "Concat":
            count(1)
            same_type(ins)
            r = len(x.shape)
            if r < 1 or any(len(v.shape) != r for v in ins) or "axis" not in attrs:
                raise ShapeError("Concat's inputs differ in rank, or have none, or no axis")
            a = _axis(iattr("axis", 0), r)
            if any(v.shape[:a] + v.shape[a + 1:] != x.shape[:a] + x.shape[a + 1:] for v in ins):
                raise ShapeError("Concat's inputs differ off the axis")
            shape = x.shape[:a] + (sum(v.shape[a] for v in ins),) + x.shape[a + 1:]
            known = [k for v in ins for k in v.known] if all(v.known is not None for v in ins) else None
            return V(x.t, shape, known)
        if op == "Constant":
            count(0, 0)
            if len(attrs) != 1:
                raise ShapeError("a Constant has exactly one attribute")
            (name, a), = attrs.items()
            if name == "value" and a.type == A_TENSOR:
                return _tensor(a.t)
            if name == "value_int" and a.type == A_INT:
                return V(INT64, (), [a.i])
            if name == "value_ints" and a.type == A_INTS:
                return V(INT64, (len(a.ints),), list(a.ints))
            if name == "value_float" and a.type == A_FLOAT:
                return V(FLOAT, ())
            if name == "value_floats" and a.type == A_FLOATS:
                return V(FLOAT, (len(a.floats),))
            if name == "value_string" and a.type == A_STRING:
                return V(STRING, ())
            if name == "value_strings" and a.type == A_STRINGS:
                return V(STRING, (len(a.strings),))
            raise ShapeError(f"a Constant's attribute {name}")
        if op == "Expand":
            count(2, 2)
            s = self.shape_input(ins[1])
            if any(d < 0 for d in s):
                raise ShapeError("Expand to a negative dimension")
            return V(x.t, broadcast(x.shape, tuple(s)))
        if op == "Flatten":
            count(1, 1)
            r = len(x.shape)
            a = iattr("axis", 1)
            if not -r <= a <= r:
                raise ShapeError("Flatten's axis out of range")
            a = a + r if a < 0 else a
            return V(x.t, (math.prod(x.shape[:a]), math.prod(x.shape[a:])))
        if op == "Gather":
            count(2, 2)
            r = len(x.shape)
            if r < 1:
                raise ShapeError("Gather of a scalar")
            a = _axis(iattr("axis", 0), r)
            idx = ins[1]
            known = None
            if r == 1 and x.known is not None and idx.known is not None:
                m = len(x.known)
                if all(-m <= i < m for i in idx.known):
                    known = [x.known[i] for i in idx.known]
            return V(x.t, x.shape[:a] + idx.shape + x.shape[a + 1:], known)
        if op == "Gemm":
            count(2, 3)
            same_type(ins)
            A, B = ins[0].shape, ins[1].shape
            if len(A) != 2 or len(B) != 2:
                raise ShapeError("Gemm of inputs that are not 2-D")
            if iattr("transA", 0) == 1:
                A = A[::-1]
            if iattr("transB", 0) == 1:
                B = B[::-1]
            if A[1] != B[0]:
                raise ShapeError("Gemm's inner dimensions differ")
            out = (A[0], B[1])
            if len(ins) == 3 and ins[2] is not None and broadcast(ins[2].shape, out) != out:
                raise ShapeError("Gemm's C does not broadcast to the output")
            return V(x.t, out)
        if op == "MatMul":
            count(2, 2)
            same_type(ins)
            a, b = list(ins[0].shape), list(ins[1].shape)
            if not a or not b:
                raise ShapeError("MatMul of a scalar")
            da, db = len(a) == 1, len(b) == 1
            a = [1] + a if da else a
            b = b + [1] if db else b
            if a[-1] != b[-2]:
                raise ShapeError("MatMul's inner dimensions differ")
            lead = broadcast(tuple(a[:-2]), tuple(b[:-2]))
            return V(x.t, lead + ((() if da else (a[-2],)) + (() if db else (b[-1],))))
        if op in ("ReduceMax", "ReduceMean", "ReduceMin", "ReduceSum"):
            count(1, 2)
            r = len(x.shape)
            axes = self.shape_input(ins[1]) if len(ins) == 2 and ins[1] is not None else []
            if not axes:
                if iattr("noop_with_empty_axes", 0) == 1:
                    return V(x.t, x.shape)
                axes = list(range(r))
            axes = _axes(axes, r)
            keep = iattr("keepdims", 1) == 1
            return V(x.t, tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes))
        if op == "Reshape":
            count(2, 2)
            s = self.shape_input(ins[1])
            zero = iattr("allowzero", 0) == 1
            if any(d < -1 for d in s) or s.count(-1) > 1 or (zero and 0 in s and -1 in s):
                raise ShapeError("Reshape's shape")
            if not zero and any(d == 0 and i >= len(x.shape) for i, d in enumerate(s)):
                raise ShapeError("Reshape copies a dimension that does not exist")
            out = [x.shape[i] if d == 0 and not zero else d for i, d in enumerate(s)]
            total, known = math.prod(x.shape), math.prod(d for d in out if d != -1)
            if -1 in out:  # the one inferred dimension: the element count over the others, a whole number
                if known == 0 or total % known:
                    raise ShapeError("Reshape's -1 is not a whole number")
                out = [total // known if d == -1 else d for d in out]
            if math.prod(out) != total:
                raise ShapeError("Reshape changes the element count")
            return V(x.t, out, x.known if len(out) <= 1 else None)
        if op == "ScatterElements":
            count(3, 3)
            r = len(x.shape)
            idx, upd = ins[1], ins[2]
            if r < 1 or idx.shape != upd.shape or len(idx.shape) != r or upd.t != x.t:
                raise ShapeError("ScatterElements' inputs")
            _axis(iattr("axis", 0), r)
            return V(x.t, x.shape)
        if op == "Shape":
            count(1, 1)
            r = len(x.shape)
            start, end = iattr("start", 0), iattr("end", r)
            start, end = [min(max(v + r if v < 0 else v, 0), r) for v in (start, end)]
            dims = x.shape[start:end]
            return V(INT64, (len(dims),), list(dims))
        if op == "Slice":
            count(3, 5)
            starts, ends = self.shape_input(ins[1]), self.shape_input(ins[2])
            r = len(x.shape)
            axes = self.shape_input(ins[3]) if len(ins) > 3 and ins[3] is not None else list(range(len(starts)))
            steps = self.shape_input(ins[4]) if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
            if not len(starts) == len(ends) == len(axes) == len(steps) or 0 in steps:
                raise ShapeError("Slice's starts, ends, axes and steps")
            shape = list(x.shape)
            picked = None
            for s, e, a, st in zip(starts, ends, _axes(axes, r), steps):
                d = shape[a]
                s, e = s + d if s < 0 else s, e + d if e < 0 else e
                if st > 0:
                    s, e = min(max(s, 0), d), min(max(e, 0), d)
                else:
                    s, e = min(max(s, 0), d - 1), min(max(e, -1), d - 1)
                rng = range(s, e, st)
                shape[a] = len(rng)
                picked = rng
            known = [x.known[i] for i in picked] if x.known is not None and r == 1 and picked is not None else None
            return V(x.t, shape, known)
        if op == "Squeeze":
            count(1, 2)
            r = len(x.shape)
            if len(ins) == 2 and ins[1] is not None:
                axes = _axes(self.shape_input(ins[1]), r)
                if any(x.shape[a] != 1 for a in axes):
                    raise ShapeError("Squeeze of a dimension other than 1")
            else:
                axes = [i for i, d in enumerate(x.shape) if d == 1]
            return V(x.t, [d for i, d in enumerate(x.shape) if i not in axes], x.known)
        if op == "Unsqueeze":
            count(2, 2)
            s = self.shape_input(ins[1])
            r = len(x.shape) + len(s)
            axes = _axes(s, r)
            it = iter(x.shape)
            shape = [1 if i in axes else next(it) for i in range(r)]
            return V(x.t, shape, x.known if r <= 1 else None)
        if op == "Transpose":
            count(1, 1)
            r = len(x.shape)
            a = attrs.get("perm")
            perm = list(a.ints) if a is not None else list(range(r))[::-1]
            if sorted(perm) != list(range(r)):
                raise ShapeError("Transpose's perm is not a permutation")
            return V(x.t, [x.shape[p] for p in perm])
        raise ShapeError(f"operator {op} has no shape rule")


def run_function(model_bytes, base, inputs, out):
    """Run a checked function for one parameter, writing `result` into ``out`` (an array of the parameter's
    shape in the dtype's numpy type, or its bit patterns for bfloat16); raises when it fails (MD428)."""
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    session = ort.InferenceSession(bytes(model_bytes), opts, providers=["CPUExecutionProvider"])

    def bound(array, declared):  # a 2-byte float input or output is bound as its bit patterns
        array = np.ascontiguousarray(array)
        if declared in ("tensor(float16)", "tensor(bfloat16)") and array.itemsize == 2:
            return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(array.view("<u2"), 10 if "(float16" in declared else 16)
        return ort.OrtValue.ortvalue_from_numpy(array)

    binding = session.io_binding()
    feeds = {"base": base, **inputs}
    for arg in session.get_inputs():
        binding.bind_ortvalue_input(arg.name, bound(feeds[arg.name], arg.type))
    result = session.get_outputs()[0]
    binding.bind_ortvalue_output(result.name, bound(out, result.type))
    session.run_with_iobinding(binding)
