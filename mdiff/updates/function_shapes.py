"""SPEC.md §7.8 check 8 and §7.9's shape rules: every value of an embedded function, typed and shaped.

An embedded function is run only when every value of its graph has a static shape within §8.3's
limits and `result` has the parameter's shape. Those shapes are computed here by the rules SPEC.md
writes down operator by operator — not by the onnx library's shape inference — so that an
implementation in another language computes the same verdict with its own code: one pass over the
nodes in graph order, each output's element type and shape from its inputs', and, for the few
small integer tensors a shape is made of, their values ("known values", folded as a runtime
would compute them, int64 and int32 arithmetic wrapping). Nothing here allocates more than the
graph's size: a shape is a list of at most max_rank integers and a known value holds at most
MAX_KNOWN_ELEMENTS of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import onnx
from onnx import AttributeProto, TensorProto

from mdiff.hdf5walk.limits import Limits, extent
from mdiff.format.onnx_functions import VALUE_TYPES

MAX_KNOWN_ELEMENTS = 64  # a shape, its axes or the starts of a Slice: never more than twice the rank limit
BOOL, INT32, INT64, FLOAT, STRING = TensorProto.BOOL, TensorProto.INT32, TensorProto.INT64, TensorProto.FLOAT, TensorProto.STRING
_WIDTH: dict[int, int] = {int(INT32): 32, int(INT64): 64}


class ShapeError(Exception):
    """The function breaks a rule of §7.8 check 8 (MD428)."""


@dataclass(frozen=True)
class Value:
    elem_type: int
    shape: tuple[int, ...]
    known: tuple[int, ...] | None = None  # the entries (C order) of a known value


def _wrap(x: int, elem_type: int) -> int:
    bits = _WIDTH[elem_type]
    return ((x + (1 << (bits - 1))) % (1 << bits)) - (1 << (bits - 1))


def _make(elem_type: int, shape: Sequence[int], entries: Sequence[int] | None) -> Value:
    """A value, known when it is an int32/int64 tensor of rank ≤ 1 and at most MAX_KNOWN_ELEMENTS entries."""
    shape = tuple(shape)
    if entries is not None and elem_type in _WIDTH and len(shape) <= 1 and math.prod(shape) <= MAX_KNOWN_ELEMENTS:
        return Value(elem_type, shape, tuple(_wrap(int(e), elem_type) for e in entries))
    return Value(elem_type, shape)


def tensor_entries(t: TensorProto) -> list[int] | None:
    """The entries of an int32/int64 tensor of at most MAX_KNOWN_ELEMENTS elements, else None."""
    n = math.prod(t.dims)
    if t.data_type not in _WIDTH or len(t.dims) > 1 or n > MAX_KNOWN_ELEMENTS:
        return None
    if t.HasField("raw_data"):
        width = _WIDTH[t.data_type] // 8
        if len(t.raw_data) != n * width:
            raise ShapeError(f"tensor {t.name!r} has {len(t.raw_data)} bytes of raw data for {n} elements")
        return [int.from_bytes(t.raw_data[i * width:(i + 1) * width], "little", signed=True) for i in range(n)]
    data = list(t.int64_data if t.data_type == INT64 else t.int32_data)
    if len(data) != n:
        raise ShapeError(f"tensor {t.name!r} has {len(data)} entries for {n} elements")
    return data


def _tensor_value(t: TensorProto) -> Value:
    if any(d < 0 for d in t.dims):
        raise ShapeError(f"tensor {t.name!r} has a negative dimension")
    return _make(t.data_type, t.dims, tensor_entries(t))


def _attrs(node: onnx.NodeProto) -> dict[str, AttributeProto]:
    return {a.name: a for a in node.attribute}


def _int_attr(node: onnx.NodeProto, name: str, default: int | None) -> int | None:
    a = _attrs(node).get(name)
    if a is None:
        return default
    if a.type != AttributeProto.INT:
        raise ShapeError(f"attribute {name!r} of {node.op_type} is not an int")
    return a.i


def _axis(axis: int, rank: int, what: str) -> int:
    if not -rank <= axis < rank:
        raise ShapeError(f"{what}: axis {axis} is outside [-{rank}, {rank - 1}]")
    return axis + rank if axis < 0 else axis


def broadcast(*shapes: Sequence[int]) -> tuple[int, ...]:
    """Multidirectional (numpy) broadcasting."""
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        dims = {s[i - rank + len(s)] for s in shapes if i - rank + len(s) >= 0} - {1}
        if len(dims) > 1:
            raise ShapeError(f"shapes {[list(s) for s in shapes]} do not broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def _broadcast_known(values: Sequence[Value], fn) -> tuple[int, ...] | None:
    """Elementwise fn over known values of rank ≤ 1 (broadcast), or None when one is not known."""
    known = [v.known for v in values]
    if any(k is None for k in known):
        return None
    entries = [k for k in known if k is not None]
    n = max(math.prod(v.shape) for v in values)
    if not all(len(k) in (1, n) for k in entries):
        return None
    return tuple(fn(*[k[i if len(k) > 1 else 0] for k in entries]) for i in range(n))


def _needs_known(v: Value, what: str, limits: Limits) -> tuple[int, ...]:
    """A shape or axes input: a known 1-D value of at most max_rank entries."""
    if v.known is None or len(v.shape) != 1:
        raise ShapeError(f"{what} is not a known 1-D value (a constant, or computed from constants and shapes)")
    if len(v.known) > limits.max_rank:
        raise ShapeError(f"{what} has {len(v.known)} entries (rank limit {limits.max_rank})")
    return v.known


_BROADCAST = frozenset("Add And BitShift BitwiseAnd BitwiseOr BitwiseXor Div Equal Greater GreaterOrEqual Less "
                       "LessOrEqual Max Min Mod Mul Or Pow Sub Sum Xor Where".split())
_COMPARISONS = frozenset("Equal Greater GreaterOrEqual Less LessOrEqual".split())
_UNARY = frozenset("Abs BitwiseNot Ceil Exp Floor Identity Log Neg Not Reciprocal Round Sign Sqrt Tanh".split())
_REDUCE = frozenset("ReduceMax ReduceMean ReduceMin ReduceSum".split())
# (fewest, most) inputs; an optional input may be given as "" where a later one is given
ARITY: dict[str, tuple[int, int]] = {
    **{op: (2, 2) for op in _BROADCAST}, "Max": (1, 2**31), "Min": (1, 2**31), "Sum": (1, 2**31), "Where": (3, 3),
    **{op: (1, 1) for op in _UNARY}, "Cast": (1, 1), "BitCast": (1, 1), "Clip": (1, 3), "Concat": (1, 2**31),
    "Constant": (0, 0), "Expand": (2, 2), "Flatten": (1, 1), "Gather": (2, 2), "Gemm": (2, 3), "MatMul": (2, 2),
    **{op: (1, 2) for op in _REDUCE}, "Reshape": (2, 2), "ScatterElements": (3, 3), "Shape": (1, 1),
    "Slice": (3, 5), "Squeeze": (1, 2), "Transpose": (1, 1), "Unsqueeze": (2, 2),
}
_FOLD = {"Add": lambda a, b: a + b, "Sub": lambda a, b: a - b, "Mul": lambda a, b: a * b}


def _constant(node: onnx.NodeProto) -> Value:
    attrs = list(node.attribute)
    if len(attrs) != 1:
        raise ShapeError("a Constant has exactly one value attribute")
    a = attrs[0]
    if a.name == "value" and a.type == AttributeProto.TENSOR:
        return _tensor_value(a.t)
    if a.name == "value_int" and a.type == AttributeProto.INT:
        return _make(INT64, (), [a.i])
    if a.name == "value_ints" and a.type == AttributeProto.INTS:
        return _make(INT64, (len(a.ints),), list(a.ints))
    if a.name == "value_float" and a.type == AttributeProto.FLOAT:
        return Value(FLOAT, ())
    if a.name == "value_floats" and a.type == AttributeProto.FLOATS:
        return Value(FLOAT, (len(a.floats),))
    if a.name == "value_string" and a.type == AttributeProto.STRING:
        return Value(STRING, ())
    if a.name == "value_strings" and a.type == AttributeProto.STRINGS:
        return Value(STRING, (len(a.strings),))
    raise ShapeError(f"a Constant's attribute {a.name!r} is not one of value, value_int(s), value_float(s), value_string(s)")


def _same_type(node: onnx.NodeProto, values: Sequence[Value]) -> int:
    types = {v.elem_type for v in values}
    if len(types) != 1:
        raise ShapeError(f"the inputs of {node.op_type} have different element types {sorted(types)}")
    return types.pop()


def _slice(node, data: Value, args: list[Value | None], limits: Limits) -> Value:
    starts = _needs_known(args[0], "Slice starts", limits)  # type: ignore[arg-type]
    ends = _needs_known(args[1], "Slice ends", limits)  # type: ignore[arg-type]
    rank = len(data.shape)
    axes = _needs_known(args[2], "Slice axes", limits) if args[2] is not None else tuple(range(len(starts)))
    steps = _needs_known(args[3], "Slice steps", limits) if args[3] is not None else (1,) * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ShapeError("Slice: starts, ends, axes and steps differ in length")
    axes = tuple(_axis(a, rank, "Slice") for a in axes)
    if len(set(axes)) != len(axes):
        raise ShapeError("Slice: an axis is repeated")
    shape = list(data.shape)
    picks: list[range] = [range(d) for d in shape]
    for start, end, axis, step in zip(starts, ends, axes, steps):
        if step == 0:
            raise ShapeError("Slice: a step of 0")
        dim = shape[axis]
        start = start + dim if start < 0 else start
        end = end + dim if end < 0 else end
        if step > 0:
            start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        else:
            start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
        picks[axis] = range(start, end, step)
        shape[axis] = len(picks[axis])
    entries = [data.known[i] for i in picks[0]] if data.known is not None and rank == 1 else None
    return _make(data.elem_type, shape, entries)


def _reshape(node, data: Value, target: tuple[int, ...]) -> tuple[int, ...]:
    allowzero = _int_attr(node, "allowzero", 0)
    if any(d < -1 for d in target) or list(target).count(-1) > 1:
        raise ShapeError(f"Reshape to {list(target)}: an entry below -1, or more than one -1")
    if allowzero and 0 in target and -1 in target:
        raise ShapeError("Reshape with allowzero: both 0 and -1")
    out = []
    for i, d in enumerate(target):
        if d == 0 and not allowzero:
            if i >= len(data.shape):
                raise ShapeError(f"Reshape: entry {i} copies a dimension the input does not have")
            d = data.shape[i]
        out.append(d)
    total = math.prod(data.shape)
    if -1 in out:
        rest = math.prod(d for d in out if d != -1)
        if rest == 0 or total % rest:
            raise ShapeError(f"Reshape of {list(data.shape)} to {list(target)}: -1 cannot be inferred")
        out[out.index(-1)] = total // rest
    if math.prod(out) != total:
        raise ShapeError(f"Reshape of {list(data.shape)} ({total} elements) to {out}")
    return tuple(out)


def _matmul(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    if not a or not b:
        raise ShapeError("MatMul of a scalar")
    a2, b2 = ((1,) + a if len(a) == 1 else a), (b + (1,) if len(b) == 1 else b)
    if a2[-1] != b2[-2]:
        raise ShapeError(f"MatMul of {list(a)} and {list(b)}: inner dimensions differ")
    out = broadcast(a2[:-2], b2[:-2]) + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


# Each operator's rule: (node, its inputs, limits) → its output. The inputs are those ARITY allows, the
# first `fewest` of them given (infer_node checks both); an omitted optional input is None.
Rule = Callable[[onnx.NodeProto, list[Value | None], Limits], Value]


def _first(args: list[Value | None]) -> Value:
    x = args[0]
    assert x is not None  # every operator with a rule here takes at least one input
    return x


def _broadcasting(node: onnx.NodeProto, args: list[Value | None], limits: Limits) -> Value:
    op = node.op_type
    given = [a for a in args if a is not None]
    if op == "Where":
        if _first(args).elem_type != BOOL:
            raise ShapeError("Where: the condition is not bool")
        t = _same_type(node, given[1:])
    elif op == "Pow":  # the exponent may be of another type
        t = given[0].elem_type
    else:
        t = _same_type(node, given)
    shape = broadcast(*(v.shape for v in given))
    if op in _COMPARISONS:
        t = BOOL
    known = _broadcast_known(given, _FOLD[op]) if op in _FOLD and t in _WIDTH else None
    return _make(t, shape, known)


def _unary(node: onnx.NodeProto, args: list[Value | None], limits: Limits) -> Value:
    op, x = node.op_type, _first(args)
    known = x.known if op == "Identity" else (
        tuple(-e for e in x.known) if op == "Neg" and x.known is not None else None)
    return _make(BOOL if op == "Not" else x.elem_type, x.shape, known)


def _cast(node: onnx.NodeProto, args: list[Value | None], limits: Limits) -> Value:
    op, x = node.op_type, _first(args)
    to = _int_attr(node, "to", None)
    if to is None or to not in VALUE_TYPES.values():
        raise ShapeError(f"{op}: `to` is not one of the element types of §7.9's table")
    return _make(to, x.shape, x.known if op == "Cast" else None)


def _clip(node: onnx.NodeProto, args: list[Value | None], limits: Limits) -> Value:
    x = _first(args)
    return Value(x.elem_type, x.shape)


def _concat(node: onnx.NodeProto, args: list[Value | None], limits: Limits) -> Value:
    x = _first(args)
    rank = len(x.shape)
    given = [a for a in args if a is not None]
    given_axis = _int_attr(node, "axis", None)
    if given_axis is None or rank == 0:
        raise ShapeError("Concat needs an axis and inputs of rank ≥ 1")
    axis = _axis(given_axis, rank, "Concat")
    t = _same_type(node, given)
    dims = list(x.shape)
    for v in given[1:]:
        if len(v.shape) != rank or any(v.shape[i] != dims[i] for i in range(rank) if i != axis):
            raise ShapeError(f"Concat of {list(x.shape)} and {list(v.shape)} along axis {axis}")
        dims[axis] += v.shape[axis]
    parts = [v.known for v in given]
    joined = [e for k in parts if k is not None for e in k] if None not in parts and rank == 1 else None
    return _make(t, dims, joined)


def _expand(node: onnx.NodeProto, args: list[Value | None], limits: Limits) -> Value:
    x = _first(args)
    target = _needs_known(args[1], "Expand's shape", limits)  # type: ignore[arg-type]
    if any(d < 0 for d in target):
        raise ShapeError(f"Expand to {list(target)}: a negative dimension")
    return Value(x.elem_type, broadcast(x.shape, target))


def _flatten(node: onnx.NodeProto, args: list[Value | None], limits: Limits) -> Value:
    x = _first(args)
    rank = len(x.shape)
    at = _int_attr(node, "axis", 1)
    assert at is not None
    if not -rank <= at <= rank:
        raise ShapeError(f"Flatten: axis {at} is outside [-{rank}, {rank}]")
    at = at + rank if at < 0 else at
    return Value(x.elem_type, (math.prod(x.shape[:at]), math.prod(x.shape[at:])))


def _gather(node: onnx.NodeProto, args: list[Value | None], limits: Limits) -> Value:
    x, ind = _first(args), args[1]
    assert ind is not None
    rank = len(x.shape)
    if not rank:
        raise ShapeError("Gather from a scalar")
    axis = _axis(_int_attr(node, "axis", 0) or 0, rank, "Gather")
    shape = x.shape[:axis] + ind.shape + x.shape[axis + 1:]
    entries = None
    if x.known is not None and ind.known is not None and rank == 1:
        n = len(x.known)
        if any(not -n <= i < n for i in ind.known):
            raise ShapeError(f"Gather: an index outside [-{n}, {n - 1}]")
        entries = [x.known[i] for i in ind.known]
    return _make(x.elem_type, shape, entries)


def _gemm(node: onnx.NodeProto, args: list[Value | None], limits: Limits) -> Value:
    a, b = args[0], args[1]
    assert a is not None and b is not None
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise ShapeError("Gemm of inputs that are not 2-D")
    m, k = a.shape[::-1] if _int_attr(node, "transA", 0) else a.shape
    k2, n = b.shape[::-1] if _int_attr(node, "transB", 0) else b.shape
    if k != k2:
        raise ShapeError(f"Gemm: inner dimensions {k} and {k2} differ")
    t = _same_type(node, [v for v in args if v is not None])
    if len(args) == 3 and args[2] is not None and broadcast(args[2].shape, (m, n)) != (m, n):
        raise ShapeError(f"Gemm: C of shape {list(args[2].shape)} does not broadcast to {[m, n]}")
    return Value(t, (m, n))


def _matmul_rule(node: onnx.NodeProto, args: list[Value | None], limits: Limits) -> Value:
    given = [a for a in args if a is not None]
    return Value(_same_type(node, given), _matmul(_first(args).shape, args[1].shape))  # type: ignore[union-attr]


def _reduce(node: onnx.NodeProto, args: list[Value | None], limits: Limits) -> Value:
    op, x = node.op_type, _first(args)
    rank = len(x.shape)
    keepdims = _int_attr(node, "keepdims", 1)
    noop = _int_attr(node, "noop_with_empty_axes", 0)
    axes = _needs_known(args[1], f"{op}'s axes", limits) if len(args) > 1 and args[1] is not None else ()
    axes = tuple(_axis(a, rank, op) for a in axes)
    if len(set(axes)) != len(axes):
        raise ShapeError(f"{op}: an axis is repeated")
    if not axes:
        if noop:
            return Value(x.elem_type, x.shape)
        axes = tuple(range(rank))
    shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape)) if keepdims else tuple(
        d for i, d in enumerate(x.shape) if i not in axes)
    return Value(x.elem_type, shape)


def _reshape_rule(node: onnx.NodeProto, args: list[Value | None], limits: Limits) -> Value:
    x = _first(args)
    target = _needs_known(args[1], "Reshape's shape", limits)  # type: ignore[arg-type]
    return _make(x.elem_type, _reshape(node, x, target), x.known)


def _scatter_elements(node: onnx.NodeProto, args: list[Value | None], limits: Limits) -> Value:
    x, ind, upd = _first(args), args[1], args[2]
    assert ind is not None and upd is not None
    rank = len(x.shape)
    _axis(_int_attr(node, "axis", 0) or 0, rank, "ScatterElements") if rank else None
    if rank == 0 or len(ind.shape) != rank or ind.shape != upd.shape:
        raise ShapeError("ScatterElements: indices and updates have the data's rank and one shape")
    if upd.elem_type != x.elem_type:
        raise ShapeError("ScatterElements: updates of another element type")
    return Value(x.elem_type, x.shape)


def _shape(node: onnx.NodeProto, args: list[Value | None], limits: Limits) -> Value:
    x = _first(args)
    rank = len(x.shape)
    start, end = _int_attr(node, "start", 0) or 0, _int_attr(node, "end", rank)
    assert end is not None
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    picked = x.shape[start:end]
    return _make(INT64, (len(picked),), picked)


def _slice_rule(node: onnx.NodeProto, args: list[Value | None], limits: Limits) -> Value:
    return _slice(node, _first(args), list(args[1:]) + [None] * (5 - len(args)), limits)


def _squeeze(node: onnx.NodeProto, args: list[Value | None], limits: Limits) -> Value:
    x = _first(args)
    rank = len(x.shape)
    if len(args) > 1 and args[1] is not None:
        axes = tuple(_axis(a, rank, "Squeeze") for a in _needs_known(args[1], "Squeeze's axes", limits))
        if len(set(axes)) != len(axes) or any(x.shape[a] != 1 for a in axes):
            raise ShapeError(f"Squeeze of {list(x.shape)} at axes {list(axes)}")
    else:
        axes = tuple(i for i, d in enumerate(x.shape) if d == 1)
    return _make(x.elem_type, [d for i, d in enumerate(x.shape) if i not in axes], x.known)


def _unsqueeze(node: onnx.NodeProto, args: list[Value | None], limits: Limits) -> Value:
    x = _first(args)
    axes_in = _needs_known(args[1], "Unsqueeze's axes", limits)  # type: ignore[arg-type]
    out_rank = len(x.shape) + len(axes_in)
    inserted = {_axis(a, out_rank, "Unsqueeze") for a in axes_in}
    if len(inserted) != len(axes_in):
        raise ShapeError("Unsqueeze: an axis is repeated")
    it = iter(x.shape)
    return _make(x.elem_type, [1 if i in inserted else next(it) for i in range(out_rank)], x.known)


def _transpose(node: onnx.NodeProto, args: list[Value | None], limits: Limits) -> Value:
    x = _first(args)
    rank = len(x.shape)
    a = _attrs(node).get("perm")
    perm = list(a.ints) if a is not None else list(range(rank))[::-1]
    if sorted(perm) != list(range(rank)):
        raise ShapeError(f"Transpose: perm {perm} is not a permutation of the {rank} axes")
    return Value(x.elem_type, tuple(x.shape[p] for p in perm))


# §7.9's table, one rule per operator (Constant has none: its value is its output, check_graph's _constant).
RULES: dict[str, Rule] = {
    **{op: _broadcasting for op in _BROADCAST}, **{op: _unary for op in _UNARY}, **{op: _reduce for op in _REDUCE},
    "Cast": _cast, "BitCast": _cast, "Clip": _clip, "Concat": _concat, "Expand": _expand, "Flatten": _flatten,
    "Gather": _gather, "Gemm": _gemm, "MatMul": _matmul_rule, "Reshape": _reshape_rule,
    "ScatterElements": _scatter_elements, "Shape": _shape, "Slice": _slice_rule, "Squeeze": _squeeze,
    "Transpose": _transpose, "Unsqueeze": _unsqueeze,
}


def infer_node(node: onnx.NodeProto, args: list[Value | None], limits: Limits) -> Value:
    """The output of one node from its inputs (None for an omitted optional input): §7.9's table."""
    op = node.op_type
    fewest, most = ARITY[op]
    if not fewest <= len(args) <= most or any(a is None for a in args[:fewest]):
        raise ShapeError(f"{op} takes {fewest} to {most} inputs, not {len(args)}")
    rule = RULES.get(op)
    if rule is None:
        raise ShapeError(f"no shape rule for {op}")  # Constant, which check_graph handles itself
    return rule(node, args, limits)


def check_graph(graph: onnx.GraphProto, inputs: Mapping[str, tuple[int, tuple[int, ...]]], result: tuple[int, tuple[int, ...]],
                limits: Limits) -> str | None:
    """Why the graph breaks §7.8 check 8 for these input (element type, shape)s, or None.

    ``result`` is the (element type, shape) `result` must have. The graph is assumed to have
    passed checks 1-7 (in particular, every name is defined once, before it is read).
    """
    values: dict[str, Value] = {name: Value(t, tuple(shape)) for name, (t, shape) in inputs.items()}

    def bounded(name: str, v: Value) -> Value:
        if len(v.shape) > limits.max_rank:
            raise ShapeError(f"{name!r} would have rank {len(v.shape)} (limit {limits.max_rank})")
        if extent(v.shape) > limits.max_elements:
            raise ShapeError(f"{name!r} would hold {extent(v.shape)} elements, counting a dimension "
                             f"of 0 as 1 (limit {limits.max_elements})")
        return v

    try:
        for t in graph.initializer:
            values[t.name] = bounded(t.name, _tensor_value(t))
        for node in graph.node:
            label = node.name or node.op_type
            args = [values[i] if i else None for i in node.input]
            try:
                out = _constant(node) if node.op_type == "Constant" else infer_node(node, args, limits)
            except ShapeError as exc:
                raise ShapeError(f"node {label}: {exc}") from None
            values[node.output[0]] = bounded(node.output[0], out)
    except ShapeError as exc:
        return str(exc)
    got = values["result"]
    if (got.elem_type, got.shape) != (result[0], tuple(result[1])):
        return f"the result would be of element type {got.elem_type} and shape {list(got.shape)}, not {result[0]} and {list(result[1])}"
    return None
