"""The normative ONNX functions and the numpy engine agree, on every update type and dtype (SPEC.md §7.9)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx.reference import ReferenceEvaluator

import mdiff
from mdiff.engines import apply_update
from mdiff.format.dtypes import DTYPES, as_bits
from mdiff.format.onnx_functions import OPSET, serialize
from mdiff.updates import ALL_TYPES, REGISTRY, sparse
from mdiff.updates.low_rank import within_tolerance
from tests.helpers import ALL_DTYPES, bits_equal, random_tensor, with_specials

SHAPES = [(37, 5), (), (0, 3), (2, 3, 4)]


def exact_updates(dtype: str, shape) -> list[tuple[str, np.ndarray, np.ndarray, mdiff.Update]]:
    """(label, base, expected result, update) for dense, sparse (some and no entries) and replace."""
    base = with_specials(random_tensor(dtype, shape, 1), dtype)
    new = with_specials(random_tensor(dtype, shape, 2), dtype, offset=3)
    few = base.copy()
    if few.size:
        as_bits(few).reshape(-1)[:: max(1, few.size // 4)] ^= 1
    none = sparse.from_entries(base, np.zeros(0, np.uint64), np.zeros(0, DTYPES[dtype].bits))
    return [
        ("dense", base, new, mdiff.dense(base, new)),
        ("dense-v2", base, new, mdiff.dense(base, new, version=2)),
        ("sparse", base, few, mdiff.sparse(base, few)),
        ("sparse-v2", base, few, mdiff.sparse(base, few, version=2)),
        ("sparse-empty", base, base, none),
        ("replace", base, new, mdiff.replace(new)),
    ]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_engines_give_the_same_bits_on_exact_types(dtype, shape):
    for label, base, expected, update in exact_updates(dtype, shape):
        before = base.copy()
        by_onnx = apply_update(update, base, label, engine="onnx")
        by_numpy = apply_update(update, base, label, engine="numpy")
        assert bits_equal(by_onnx, expected), label
        assert bits_equal(by_numpy, expected), label
        assert bits_equal(base, before), f"{label}: the base was modified without scratch"


@pytest.mark.parametrize("engine", ["onnx", "numpy"])
def test_scratch_lets_the_result_reuse_the_base_buffer(engine):
    base = random_tensor("float32", (64, 64), 1)
    new = random_tensor("float32", (64, 64), 2)
    for update in (mdiff.dense(base, new), mdiff.sparse(base, np.where(np.eye(64, dtype=bool), new, base))):
        scratch = base.copy()
        result = apply_update(update, scratch, "w", engine=engine, scratch=True)
        assert np.shares_memory(result, scratch)
    lr = mdiff.low_rank(np.ones((64, 2)), np.ones((2, 64)), (64, 64), DTYPES["float32"])
    scratch = base.copy()
    assert np.shares_memory(apply_update(lr, scratch, "w", engine=engine, scratch=True), scratch) == (engine == "onnx")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("shape", [(48, 20), (16, 3, 5), (9,)], ids=str)
def test_engines_agree_on_low_rank_within_tolerance(dtype, shape):
    rng = np.random.default_rng(7)
    base = random_tensor(dtype, shape, 3)
    m, n = shape[0], int(np.prod(shape[1:]))
    r = min(4, m, n)
    update = mdiff.low_rank(rng.standard_normal((m, r)), rng.standard_normal((r, n)), shape, DTYPES[dtype], scale=0.5)
    by_onnx = apply_update(update, base, "w", engine="onnx")
    by_numpy = apply_update(update, base, "w", engine="numpy")
    assert by_onnx.dtype == by_numpy.dtype == base.dtype and by_onnx.shape == shape
    assert within_tolerance(by_onnx, base, update) and within_tolerance(by_numpy, base, update)


def test_low_rank_rounds_to_nearest_even_in_both_engines():
    """1 + 2⁻⁸ is a tie between two bfloat16 values: both engines round it to 1 (the even one)."""
    base = np.array([[1.0]], dtype=np.float32).astype(DTYPES["bfloat16"].value)
    update = mdiff.low_rank(np.array([[2.0**-8]]), np.array([[1.0]]), (1, 1), DTYPES["bfloat16"])
    for engine in ("onnx", "numpy"):
        assert apply_update(update, base, "w", engine=engine).view(np.uint16).tolist() == [[0x3F80]]


def normative_models() -> dict[str, onnx.ModelProto]:
    return {name: model for kind in ALL_TYPES for name, model in kind.onnx_models().items()}


def test_every_model_is_standard_onnx_of_the_pinned_opset():
    models = normative_models()
    assert len(models) == 4 * 5 + 4  # dense v1, v2, sparse v1, v2, replace per bit width; low_rank per float dtype
    for name, model in models.items():
        onnx.checker.check_model(model, full_check=True)
        assert [(o.domain, o.version) for o in model.opset_import] == [("", OPSET)], name
        assert not model.functions and all(n.domain == "" for n in model.graph.node), name
        assert serialize(model) == serialize(normative_models()[name]), f"{name} is not deterministic"


@pytest.mark.parametrize("dtype", ["uint8", "int16", "float32", "float64"])
def test_a_second_onnx_runtime_agrees(dtype):
    """onnx's pure-Python ReferenceEvaluator runs the same models to the same bits."""
    models = normative_models()
    for label, base, expected, update in exact_updates(dtype, (6, 7)):
        bits = as_bits(base).reshape(-1)
        if label == "replace":
            feeds, model = {"value": update.array("value").view(bits.dtype).reshape(-1)}, f"replace_u{bits.itemsize * 8}"
        elif label == "dense" or (label == "dense-v2" and dtype == "bool"):
            feeds, model = {"base": bits, "xor": update.array("xor").reshape(-1)}, f"dense_u{bits.itemsize * 8}"
        elif label == "dense-v2":
            feeds, model = {"base": bits, "sub": update.array("sub").reshape(-1)}, f"dense_v2_u{bits.itemsize * 8}"
        elif label == "sparse-v2":
            feeds = {"base": bits, "gaps": update.array("gaps"), "sub": update.array("sub")}
            model = f"sparse_v2_u{bits.itemsize * 8}"
        else:
            feeds = {"base": bits, "indices": update.array("indices"), "xor": update.array("xor")}
            model = f"sparse_u{bits.itemsize * 8}"
        (got,) = ReferenceEvaluator(models[model]).run(None, feeds)
        assert np.array_equal(got, as_bits(expected).reshape(-1)), label


def test_auto_uses_numpy_only_for_types_whose_engines_are_proven_equal_above():
    """`auto` may pick the numpy twin only where test_engines_give_the_same_bits_on_exact_types covers it."""
    proven = {label for label, *_ in exact_updates("float32", (3,))}
    by_numpy = {name for name, kind in REGISTRY.items() if kind.preferred_engine == "numpy"}
    assert by_numpy == {"dense", "sparse", "replace"}
    assert by_numpy <= proven
