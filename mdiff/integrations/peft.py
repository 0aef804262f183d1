"""PEFT LoRA adapters as mdiff updates (SPEC.md §7.5). (One module of ~640 lines, most of it the rules of
PEFT's own formats that it must follow exactly, each with its reason.)

A LoRA adapter saved by PEFT's ``save_pretrained`` is a folder holding
``adapter_config.json`` and ``adapter_model.safetensors``. This module reads
both directly (it imports neither ``peft`` nor ``torch``) and turns the
adapter into the updates that take the base model to PEFT's
``merge_and_unload()`` of it::

    from mdiff.integrations.peft import lora_updates, lora_updates_from_checkpoint

    updates = lora_updates_from_checkpoint("adapter/", "base.safetensors")
    # or, with the base's specs from elsewhere:
    with open_checkpoint("base.safetensors") as base:
        specs = {name: base.spec(name) for name in base.keys()}
        updates = lora_updates("adapter/", specs, read_base=base.read)
    mdiff.write("commit.mdiff", updates, commit)

What an adapter becomes
-----------------------
- The factors ``lora_A`` (r × in) and ``lora_B`` (out × r) of a module
  ``MOD`` are a ``low_rank`` update of the base parameter ``MOD.weight``
  with ``A = lora_B``, ``B = lora_A`` and ``scale = lora_alpha / r``
  (``lora_alpha / sqrt(r)`` with ``use_rslora``), ``r`` and ``lora_alpha``
  taken from ``rank_pattern`` / ``alpha_pattern`` where a pattern matches
  the module, exactly as PEFT's ``get_pattern_key`` matches them.
- ``fan_in_fan_out`` (GPT-2's ``Conv1D``, whose weight is in × out): the
  delta is transposed, so ``A = lora_Aᵀ`` and ``B = lora_Bᵀ``.
- Convolutions: ``lora_A`` is r × in × k…, ``lora_B`` out × r × 1…; the
  delta is ``lora_B`` (out × r) times ``lora_A`` flattened to r × (in·k…),
  which is the base weight's matrix view (§7.5).
- Embeddings: ``lora_embedding_A`` (r × num) and ``lora_embedding_B``
  (dim × r) give the delta ``(B·A)ᵀ``, so ``A = lora_embedding_Aᵀ`` and
  ``B = lora_embedding_Bᵀ``.
- ``lora_bias=True``: PEFT's merge adds ``scale · lora_B.bias`` to
  ``MOD.bias``; that is the rank-1 ``low_rank`` update ``A = bias`` (out × 1),
  ``B = [[1]]``.
- Every other tensor of the adapter is a full value PEFT loads over the
  base parameter of that name: ``modules_to_save`` (e.g. a classification
  head), the biases that ``bias="all"`` / ``"lora_only"`` trains, and the
  embeddings ``save_embedding_layers`` stores. Each becomes a ``replace``
  update (exact); with ``read_base``, a value bit-identical to the base is
  left out. ``MOD.base_layer.X`` of a LoRA-wrapped module is ``MOD.X`` of the
  base.
- Where a factor's rank exceeds ``min(m, n)`` (a tiny head with r = 8), §7.5
  allows no such factors: the product is formed in float64 and stored as
  ``I · (A·B)`` with rank ``min(m, n)`` (one rounding to the compute dtype).

Names
-----
The adapter names modules as PEFT saw them (``base_model.model.`` + the
module path in the model class it wrapped). The base checkpoint may have been
saved from another class of the same model, with or without a wrapper prefix
(``model.``, ``transformer.``, ``bert.`` …, see :data:`BASE_PREFIXES`). One
renaming is chosen for the whole adapter: the names as they are if the base
has every parameter the adapter needs, else the one rule — drop a known prefix
from every name, or add one to every name — under which it has all of them.
No such rule, or more than one, is an :class:`~mdiff.errors.ApplyError`
(MD600).

Refusals
--------
:class:`~mdiff.errors.CheckpointError` MD701 for an adapter that is malformed
or whose merge is not ``W + scale·(B·A)`` on the base it names: ``peft_type``
other than LORA, DoRA and the other LoRA variants, initialisations that
rewrite the base weights (PiSSA, OLoRA, CorDA, LoftQ, LoRA-GA, MiCA; convert
them with ``path_initial_model_for_weight_conversion`` first), QALoRA,
``layer_replication``, ``target_parameters``, ``trainable_token_indices``,
factors whose rank disagrees with the config, factors for a module the
config does not target (PEFT would ignore them on loading), grouped
convolutions. MD700 for a pickled ``adapter_model.bin`` (never unpickled:
convert it to safetensors). :class:`~mdiff.errors.ApplyError` MD600 when the
base lacks a parameter the adapter changes, MD601 when its shape or dtype
does not fit the factors.

Imported factors are not marked ``lossy`` (SPEC.md §7.1): they are the
adapter's own, and PEFT's merge is reproduced within §7.5's tolerance — except
where a rank above what §7.5 allows had to be folded into one rounded product.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import numpy as np

from mdiff.errors import ApplyError, CheckpointError
from mdiff.format.dtypes import DType, as_bits
from mdiff.updates import low_rank, replace
from mdiff.updates.base import Update

__all__ = ["BASE_PREFIXES", "lora_updates", "lora_updates_from_checkpoint"]

CONFIG_NAME = "adapter_config.json"
WEIGHTS_NAME = "adapter_model.safetensors"
PICKLE_NAMES = ("adapter_model.bin", "adapter_model.pt", "adapter_model.pth")

# Every key PEFT saves for a LoRA adapter starts with this.
KEY_PREFIX = "base_model.model."

# Wrapper prefixes by which a base checkpoint's names may differ from the
# adapter's: the base_model_prefix of common transformers classes, and what
# DataParallel and torch.compile put in front.
BASE_PREFIXES = (
    "model.",
    "transformer.",
    "base_model.",
    "language_model.",
    "model.language_model.",
    "bert.",
    "roberta.",
    "distilbert.",
    "deberta.",
    "electra.",
    "albert.",
    "gpt_neox.",
    "backbone.",
    "vit.",
    "module.",
    "_orig_mod.",
)

# Config members whose truthy value makes the merge something other than
# W + scale·(B·A), or the adapter relative to something other than the base.
_REFUSED_OPTIONS = {
    "use_dora": "DoRA (use_dora) rescales each column of W + scale·(B·A) by a learned magnitude",
    "velora_config": "VeLoRA (velora_config) is a LoRA variant",
    "alora_invocation_tokens": "activated LoRA (alora_invocation_tokens) applies only after its invocation tokens "
    "and cannot be merged into the weights",
    "monteclora_config": "MonteCLoRA (monteclora_config) is a LoRA variant",
    "use_bdlora": "block-diagonal LoRA (use_bdlora) is a LoRA variant",
    "arrow_config": "Arrow (arrow_config) routes between adapters at run time",
    "kasa_config": "KaSA (kasa_config) modifies the base weights",
    "use_qalora": "QALoRA (use_qalora) pools the input before lora_A",
    "layer_replication": "layer_replication builds layers the base checkpoint does not have",
    "target_parameters": "LoRA on parameters (target_parameters) uses another layout of the factors",
    "trainable_token_indices": "trainable tokens (trainable_token_indices) are not LoRA factors",
}

# init_lora_weights values that rewrite the base weights (W_res = W − scale·B·A):
# the adapter is relative to that residual model, not to the base.
_BASE_REWRITING_INITS = ("pissa", "corda", "olora", "loftq", "lora_ga", "mica")

_KEY_RE = re.compile(r"(?P<module>.+)\.(?P<part>lora_A\.weight|lora_B\.weight|lora_B\.bias|lora_embedding_A|lora_embedding_B)")


def _malformed(message: str, path: str | None = None) -> CheckpointError:
    return CheckpointError("MD701", message, path)


# ----------------------------------------------------------------- config


@dataclass(frozen=True)
class _LoraConfig:
    r: int
    lora_alpha: float
    use_rslora: bool
    fan_in_fan_out: bool
    rank_pattern: dict[str, int]
    alpha_pattern: dict[str, float]
    target_modules: Any
    exclude_modules: Any
    modules_to_save: Any
    layers_to_transform: Any
    layers_pattern: Any
    path: str = field(default="", compare=False)

    def rank_and_scale(self, module: str) -> tuple[int, float]:
        """``(r, scale)`` of a module, as ``LoraModel._create_and_replace`` and ``LoraLayer.update_layer`` find them."""
        r = self.rank_pattern.get(_pattern_key(self.rank_pattern, module, self.path), self.r)
        alpha = self.alpha_pattern.get(_pattern_key(self.alpha_pattern, module, self.path), self.lora_alpha)
        scale = alpha / math.sqrt(r) if self.use_rslora else alpha / r
        return r, scale

    def targets(self, module: str) -> bool:
        """Whether PEFT would put a LoRA layer on ``module`` (``peft.tuners.tuners_utils.check_target_module_exists``)."""
        try:
            return _target_module_exists(self, module)
        except re.error as error:
            raise _malformed(f"a pattern in target_modules/exclude_modules/layers_pattern is not a regular expression: {error}", self.path) from None


def _pattern_key(patterns: Mapping[str, Any], module: str, path: str) -> str:
    """``peft.utils.other.get_pattern_key``: the first key, in the config's order, that matches the
    module's name or a dot-separated suffix of it (keys are regular expressions); else the name."""
    for key in patterns:
        try:
            if re.match(rf"(.*\.)?({key})$", module):
                return key
        except re.error as error:
            raise _malformed(f"rank_pattern/alpha_pattern key {key!r} is not a regular expression: {error}", path) from None
    return module


def _target_module_exists(config: _LoraConfig, key: str) -> bool:
    # A port of peft.tuners.tuners_utils.check_target_module_exists (PEFT 0.21) for LoRA.
    exclude = config.exclude_modules
    if exclude:
        if isinstance(exclude, str):
            if re.fullmatch(exclude, key):
                return False
        elif key in exclude or any(key.endswith(f".{e}") for e in exclude):
            return False
    if config.modules_to_save and any(re.match(rf"(^|.*\.){m}($|\..*)", key) for m in config.modules_to_save):
        return False
    targets = config.target_modules
    if isinstance(targets, str):
        # "all-linear" is resolved to module names before PEFT saves the config; if it is still
        # there, the config cannot tell which modules were targeted.
        return targets == "all-linear" or re.fullmatch(targets, key) is not None
    if key in targets:
        return True
    found = any(key.endswith(f".{t}") for t in targets)
    indexes = config.layers_to_transform
    using_indexes = indexes is not None and (len(indexes) != 0 if isinstance(indexes, list) else True)
    if using_indexes and found:
        pattern = config.layers_pattern
        match = None
        if pattern is None or len(pattern) == 0:
            match = re.match(r".*?\.[^.]*\.(?P<idx>\d+)\.", key)
        else:
            for p in [pattern] if isinstance(pattern, str) else pattern:
                match = re.match(rf"(?:^|.*?\.){p}\.(?P<idx>\d+)\.", key)
                if match is not None:
                    break
        index = match.groupdict().get("idx") if match else None
        if index is None:
            return False
        return int(index) == indexes if isinstance(indexes, int) else int(index) in indexes
    return found


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> TypeGuard[float]:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)) and math.isfinite(value)


def _read_config(adapter_dir: str) -> _LoraConfig:
    path = os.path.join(adapter_dir, CONFIG_NAME)
    if not os.path.isfile(path):
        raise _malformed(f"{CONFIG_NAME} is missing: not a PEFT adapter folder", adapter_dir)
    try:
        with open(path, "rb") as file:
            raw = json.loads(file.read().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise _malformed(f"{CONFIG_NAME} is not JSON: {error}", path) from None
    if not isinstance(raw, dict):
        raise _malformed(f"{CONFIG_NAME} does not hold a JSON object", path)

    peft_type = raw.get("peft_type")
    if peft_type != "LORA":
        raise _malformed(f"peft_type is {peft_type!r}: only LoRA adapters (peft_type LORA) are low_rank updates", path)
    for option, why in _REFUSED_OPTIONS.items():
        if raw.get(option):
            raise _malformed(f"unsupported adapter: {why}; its merge is not W + scale·(B·A)", path)
    init = raw.get("init_lora_weights", True)
    if isinstance(init, str) and init.lower().startswith(_BASE_REWRITING_INITS):
        raise _malformed(
            f"init_lora_weights={init!r} rewrites the base weights when the adapter is created, so this adapter "
            "applies to that rewritten model, not to the base; save it with PEFT's "
            "path_initial_model_for_weight_conversion to get a plain LoRA adapter of the base",
            path,
        )

    r, alpha = raw.get("r"), raw.get("lora_alpha")
    if not (_is_int(r) and r >= 1):
        raise _malformed(f"r is {r!r}, not a positive integer", path)
    if not _is_number(alpha):
        raise _malformed(f"lora_alpha is {alpha!r}, not a finite number", path)
    patterns = {}
    for name, valid, what in (("rank_pattern", lambda v: _is_int(v) and v >= 1, "positive integers"),
                              ("alpha_pattern", _is_number, "finite numbers")):
        pattern = raw.get(name) or {}
        if not (isinstance(pattern, dict) and all(isinstance(k, str) and valid(v) for k, v in pattern.items())):
            raise _malformed(f"{name} is {pattern!r}, not an object mapping patterns to {what}", path)
        patterns[name] = pattern
    flags = {}
    for name in ("use_rslora", "fan_in_fan_out"):
        value = raw.get(name, False)
        if not isinstance(value, bool):
            raise _malformed(f"{name} is {value!r}, not true or false", path)
        flags[name] = value

    targets = raw.get("target_modules")
    if not (isinstance(targets, str) or (isinstance(targets, list) and all(isinstance(t, str) for t in targets))):
        raise _malformed(f"target_modules is {targets!r}, not a string or a list of strings", path)
    exclude = raw.get("exclude_modules")
    if not (exclude is None or isinstance(exclude, str) or (isinstance(exclude, list) and all(isinstance(t, str) for t in exclude))):
        raise _malformed(f"exclude_modules is {exclude!r}, not a string or a list of strings", path)
    to_save = raw.get("modules_to_save")
    if not (to_save is None or (isinstance(to_save, list) and all(isinstance(t, str) for t in to_save))):
        raise _malformed(f"modules_to_save is {to_save!r}, not a list of strings", path)
    indexes = raw.get("layers_to_transform")
    if not (indexes is None or _is_int(indexes) or (isinstance(indexes, list) and all(_is_int(i) for i in indexes))):
        raise _malformed(f"layers_to_transform is {indexes!r}, not an integer or a list of integers", path)
    layers_pattern = raw.get("layers_pattern")
    if not (layers_pattern is None or isinstance(layers_pattern, str)
            or (isinstance(layers_pattern, list) and all(isinstance(p, str) for p in layers_pattern))):
        raise _malformed(f"layers_pattern is {layers_pattern!r}, not a string or a list of strings", path)

    return _LoraConfig(
        r=r, lora_alpha=alpha, use_rslora=flags["use_rslora"], fan_in_fan_out=flags["fan_in_fan_out"],
        rank_pattern=patterns["rank_pattern"], alpha_pattern=patterns["alpha_pattern"],
        target_modules=targets, exclude_modules=exclude, modules_to_save=to_save,
        layers_to_transform=indexes, layers_pattern=layers_pattern, path=path,
    )


# ----------------------------------------------------------------- tensors


@dataclass
class _Module:
    """The LoRA tensors of one module, by part (``lora_A.weight`` …)."""

    name: str
    parts: dict[str, np.ndarray] = field(default_factory=dict)


def _read_tensors(adapter_dir: str) -> tuple[dict[str, _Module], dict[str, np.ndarray], str]:
    from mdiff.checkpoints import open_checkpoint

    path = os.path.join(adapter_dir, WEIGHTS_NAME)
    if not os.path.isfile(path):
        for name in PICKLE_NAMES:
            if os.path.isfile(os.path.join(adapter_dir, name)):
                raise CheckpointError(
                    "MD700",
                    f"{name} is a pickle, which mdiff does not load (unpickling runs code); convert the adapter "
                    f"to {WEIGHTS_NAME}, e.g. PeftModel.from_pretrained(...).save_pretrained(dir, "
                    "safe_serialization=True)",
                    os.path.join(adapter_dir, name),
                )
        raise _malformed(f"{WEIGHTS_NAME} is missing: not a PEFT adapter folder", adapter_dir)

    modules: dict[str, _Module] = {}
    values: dict[str, np.ndarray] = {}
    with open_checkpoint(path) as reader:
        for key in reader.keys():
            if not key.startswith(KEY_PREFIX):
                raise _malformed(f"tensor {key!r} does not start with {KEY_PREFIX!r}: not a PEFT LoRA adapter", path)
            rest = key[len(KEY_PREFIX):]
            match = _KEY_RE.fullmatch(rest)
            if match:
                module = modules.setdefault(match["module"], _Module(match["module"]))
                module.parts[match["part"]] = reader.read(key)
                continue
            components = rest.split(".")
            if "lora_magnitude_vector" in components:
                raise _malformed(f"tensor {key!r} is a DoRA magnitude: DoRA's merge is not W + scale·(B·A)", path)
            if "trainable_tokens_delta" in components:
                raise _malformed(f"tensor {key!r} belongs to trainable tokens, which are not LoRA factors", path)
            if any(c.startswith("lora_") for c in components):
                raise _malformed(f"tensor {key!r} is not a LoRA factor this reader knows (lora_A.weight, "
                                 "lora_B.weight, lora_B.bias, lora_embedding_A, lora_embedding_B)", path)
            values[rest] = reader.read(key)
    return modules, values, path


def _full_value_name(key: str, lora_modules: Mapping[str, _Module]) -> str:
    """``MOD.base_layer.X`` → ``MOD.X`` where PEFT wrapped MOD in a LoRA layer."""
    module, _, leaf = key.rpartition(".")
    if module.endswith(".base_layer") and module[: -len(".base_layer")] in lora_modules:
        return f"{module[: -len('.base_layer')]}.{leaf}"
    return key


# ----------------------------------------------------------------- names


def _renamings():
    yield "as is", lambda name: name
    for prefix in BASE_PREFIXES:
        yield f"without the prefix {prefix!r}", lambda name, p=prefix: name[len(p):] if name.startswith(p) else None
    for prefix in BASE_PREFIXES:
        yield f"with the prefix {prefix!r}", lambda name, p=prefix: p + name


def _map_names(needed: Mapping[str, str], base_specs: Mapping[str, Any]) -> dict[str, str]:
    """adapter parameter name → base parameter name, by one renaming for all (see the module doc).

    ``needed`` maps each adapter parameter name to what it is, for messages.
    """
    complete, best, best_count = [], None, -1
    for label, rename in _renamings():
        mapped = {name: rename(name) for name in needed}
        count = sum(1 for new in mapped.values() if new is not None and new in base_specs)
        if count == len(needed):
            if label == "as is":
                return mapped
            complete.append((label, mapped))
        if count > best_count:
            best, best_count = (label, mapped), count
    if len(complete) == 1:
        return complete[0][1]
    if complete:
        labels = "; ".join(label for label, _ in complete)
        raise ApplyError("MD600", f"the adapter's names map onto the base in more than one way ({labels}): ambiguous")
    assert best is not None  # every candidate is scored
    label, mapped = best
    missing = sorted(name for name, new in mapped.items() if new is None or new not in base_specs)
    shown = ", ".join(f"{mapped[n] or n!r} ({needed[n]})" for n in missing[:5])
    raise ApplyError(
        "MD600",
        f"the base lacks {len(missing)} parameter(s) the adapter changes, named {label}: {shown}"
        + (" …" if len(missing) > 5 else "")
        + f"; tried the names as they are and with a prefix from {', '.join(BASE_PREFIXES)} added or removed",
        mapped[missing[0]] or missing[0],
    )


# ----------------------------------------------------------------- updates


def _compute(dt: DType) -> np.dtype:
    return low_rank.compute_dtype(dt)


def _float_factor(array: np.ndarray, what: str, path: str) -> np.ndarray:
    if array.dtype.kind != "f" and array.dtype.name != "bfloat16":
        raise _malformed(f"{what} has dtype {array.dtype}, not a floating-point type", path)
    return array


def _factors(module: _Module, config: _LoraConfig, path: str) -> tuple[str, np.ndarray, np.ndarray, int]:
    """(layout, lora A, lora B, rank) of a module, checked against each other and the config."""
    parts = module.parts
    name = module.name
    if "lora_embedding_A" in parts or "lora_embedding_B" in parts:
        if "lora_A.weight" in parts or "lora_B.weight" in parts or "lora_B.bias" in parts:
            raise _malformed(f"module {name!r} has both linear and embedding LoRA factors", path)
        if not ("lora_embedding_A" in parts and "lora_embedding_B" in parts):
            raise _malformed(f"module {name!r} lacks lora_embedding_A or lora_embedding_B", path)
        a, b = parts["lora_embedding_A"], parts["lora_embedding_B"]
        layout = "embedding"
    else:
        if not ("lora_A.weight" in parts and "lora_B.weight" in parts):
            raise _malformed(f"module {name!r} lacks lora_A.weight or lora_B.weight", path)
        a, b = parts["lora_A.weight"], parts["lora_B.weight"]
        layout = "linear" if a.ndim == 2 else "conv"
    _float_factor(a, f"{name} lora A", path)
    _float_factor(b, f"{name} lora B", path)
    if layout == "conv":
        if not (3 <= a.ndim <= 5 and b.ndim == a.ndim and all(d == 1 for d in b.shape[2:])):
            raise _malformed(f"module {name!r}: factors of shapes {list(a.shape)} and {list(b.shape)} are neither "
                             "linear (2-D) nor convolution (r×in×k…, out×r×1…) LoRA factors", path)
    elif a.ndim != 2 or b.ndim != 2:
        raise _malformed(f"module {name!r}: factors of shapes {list(a.shape)} and {list(b.shape)} are not matrices", path)
    rank = a.shape[0]
    if b.shape[1] != rank:
        hint = " (a grouped convolution? PEFT cannot merge those)" if layout == "conv" else ""
        raise _malformed(f"module {name!r}: lora A has rank {rank} but lora B has {b.shape[1]}{hint}", path)
    r, _ = config.rank_and_scale(name)
    if rank != r:
        raise _malformed(f"module {name!r}: the factors have rank {rank} but adapter_config.json gives r = {r} "
                         "(r, rank_pattern), on which the scale depends", path)
    if "lora_B.bias" in parts:
        bias = _float_factor(parts["lora_B.bias"], f"{name} lora_B.bias", path)
        if bias.shape != (b.shape[0],):
            raise _malformed(f"module {name!r}: lora_B.bias has shape {list(bias.shape)}, not [{b.shape[0]}]", path)
    return layout, a, b, rank


def _low_rank(A: np.ndarray, B: np.ndarray, shape, dt: DType, scale: float) -> Update:
    """A low_rank update, folding factors whose rank exceeds what §7.5 allows (r ≤ max(1, min(m, n)))."""
    c = _compute(dt)
    m, n = low_rank.matrix_shape(shape)
    folded = A.shape[1] > max(1, min(m, n))
    if folded:
        product = _product_in_order(A, B)
        if min(m, n) == 0:
            A, B = np.zeros((m, 1), c), np.zeros((1, n), c)
        elif m <= n:
            A, B = np.eye(m, dtype=c), product.astype(c)
        else:
            A, B = product.astype(c), np.eye(n, dtype=c)
    # The adapter's own factors and scale are stored as they are: PEFT's merge W + s·(B·A) is
    # reproduced within §7.5's tolerance, so the update is not lossy. Folding a rank that §7.5
    # does not allow rounds the product once: that one is.
    return low_rank.encode(A.astype(c), B.astype(c), shape, dt, scale, lossy=folded)


def _product_in_order(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """A · B in binary64, each entry's terms added in the order of k from +0, each product and sum rounded once:
    the same bits on every CPU, so the folded factors (stored, so part of the file's bytes and of a commit's id,
    §11) are too. A BLAS matmul adds in an order its kernel, chosen for the CPU, decides. A fold happens only where
    the rank exceeds min(m, n), so this costs r products of an m × n matrix that small side bounds."""
    a, b = A.astype(np.float64), B.astype(np.float64)
    product = np.zeros((a.shape[0], b.shape[1]), np.float64)
    term = np.empty_like(product)
    for k in range(a.shape[1]):
        np.multiply.outer(a[:, k], b[k, :], out=term)
        np.add(product, term, out=product)
    return product


def _check_spec(base_name: str, spec, expected: tuple[int, ...], what: str, hint: str = "") -> DType:
    shape, dt = spec
    if tuple(shape) != tuple(expected):
        raise ApplyError("MD601", f"the base parameter has shape {list(shape)}, but {what} needs {list(expected)}{hint}",
                         base_name)
    if not dt.is_float:
        raise ApplyError("MD601", f"the base parameter has dtype {dt.name}; a LoRA update needs a floating-point one",
                         base_name)
    return dt


def _module_updates(module: _Module, config: _LoraConfig, names: Mapping[str, str],
                    base_specs: Mapping[str, Any], path: str) -> dict[str, Update]:
    layout, a, b, rank = _factors(module, config, path)
    _, scale = config.rank_and_scale(module.name)
    weight = names[f"{module.name}.weight"]
    what = f"the LoRA factors of {module.name!r}"
    if layout == "embedding":
        # PEFT: delta = (lora_embedding_B @ lora_embedding_A)ᵀ, num × dim.
        dt = _check_spec(weight, base_specs[weight], (a.shape[1], b.shape[0]), what)
        A, B = a.T, b.T
    elif layout == "conv":
        # delta[o, i, k…] = Σ_r B[o, r] A[r, i, k…]: out × (in·k…) = B (out × r) · A (r × in·k…).
        dt = _check_spec(weight, base_specs[weight], (b.shape[0], *a.shape[1:]), what)
        A, B = b.reshape(b.shape[0], rank), a.reshape(rank, -1)
    else:
        out_in, in_out = (b.shape[0], a.shape[1]), (a.shape[1], b.shape[0])
        expected, other = (in_out, out_in) if config.fan_in_fan_out else (out_in, in_out)
        hint = ""
        if tuple(base_specs[weight][0]) == other and other != expected:
            hint = (f" (fan_in_fan_out={str(config.fan_in_fan_out).lower()} in adapter_config.json; the factors fit "
                    "the other layout: does the adapter mix Conv1D and Linear targets?)")
        dt = _check_spec(weight, base_specs[weight], expected, what, hint)
        # PEFT: delta = transpose(lora_B @ lora_A, fan_in_fan_out) · scale.
        A, B = (a.T, b.T) if config.fan_in_fan_out else (b, a)
    c = _compute(dt)
    updates = {weight: _low_rank(np.asarray(A, c), np.asarray(B, c), base_specs[weight][0], dt, scale)}
    if "lora_B.bias" in module.parts:
        bias_name = names[f"{module.name}.bias"]
        bias = module.parts["lora_B.bias"]
        bias_dt = _check_spec(bias_name, base_specs[bias_name], bias.shape, f"lora_B.bias of {module.name!r}")
        bc = _compute(bias_dt)
        # PEFT's merge: bias += lora_B.bias · scale, the rank-1 update bias (out × 1) · [[1]].
        updates[bias_name] = low_rank.encode(bias.astype(bc).reshape(-1, 1), np.ones((1, 1), bc), bias.shape, bias_dt, scale)
    return updates


def _full_value(value: np.ndarray, base_name: str, spec) -> np.ndarray:
    shape, dt = spec
    if tuple(value.shape) != tuple(shape):
        raise ApplyError("MD601", f"the adapter's full value has shape {list(value.shape)}, the base parameter "
                         f"{list(shape)}", base_name)
    if value.dtype != dt.value:
        if not (dt.is_float and (value.dtype.kind == "f" or value.dtype.name == "bfloat16")):
            raise ApplyError("MD601", f"the adapter's full value has dtype {value.dtype}, the base parameter "
                             f"{dt.name}", base_name)
        # What PEFT's load does: copy_ into the base's parameter, rounding to nearest even.
        value = value.astype(dt.value)
    return np.ascontiguousarray(value)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(as_bits(a), as_bits(b))


def lora_updates(
    adapter_dir: str | os.PathLike[str],
    base_specs: Mapping[str, tuple[tuple[int, ...], DType]],
    *,
    read_base: Callable[[str], np.ndarray] | None = None,
) -> dict[str, Update]:
    """The updates, by base parameter name, that take the base to PEFT's merge of the adapter.

    ``base_specs`` maps each base parameter name to ``(shape, DType)``, e.g.
    ``{n: reader.spec(n) for n in reader.keys()}`` for a reader of
    :func:`mdiff.checkpoints.open_checkpoint`. ``read_base`` (e.g. that reader's
    ``read``) is optional: with it, full values the adapter carries that equal
    the base are left out, and a saved copy of a LoRA-wrapped layer's own
    weight (``save_embedding_layers``) is checked against the base instead of
    refused. See the module's doc for what becomes what and what is refused.
    """
    adapter_dir = os.fspath(adapter_dir)
    if not os.path.exists(adapter_dir):
        raise FileNotFoundError(f"no such adapter folder: {adapter_dir!r}")
    if not os.path.isdir(adapter_dir):
        raise NotADirectoryError(f"{adapter_dir!r} is not a folder (a PEFT adapter is a folder)")
    config = _read_config(adapter_dir)
    modules, values, path = _read_tensors(adapter_dir)

    for name in modules:
        if not config.targets(name):
            raise _malformed(f"the adapter holds LoRA factors for {name!r}, which adapter_config.json's "
                             "target_modules do not target; PEFT would ignore them when loading", path)

    full = {}
    for key, value in values.items():
        name = _full_value_name(key, modules)
        if name in full:
            raise _malformed(f"the adapter holds two full values for {name!r}", path)
        full[name] = (key, value)

    needed: dict[str, str] = {}
    for name, module in modules.items():
        needed[f"{name}.weight"] = f"LoRA factors of {name}"
        if "lora_B.bias" in module.parts:
            needed[f"{name}.bias"] = f"lora_B.bias of {name}"
    for name, (key, _) in full.items():
        needed.setdefault(name, f"full value {KEY_PREFIX}{key}")
    names = _map_names(needed, base_specs) if needed else {}

    updates: dict[str, Update] = {}
    for name in sorted(modules):
        for base_name, update in _module_updates(modules[name], config, names, base_specs, path).items():
            if base_name in updates:
                raise ApplyError("MD600", "two adapter modules map onto this base parameter", base_name)
            updates[base_name] = update
    for name in sorted(full):
        key, value = full[name]
        base_name = names[name]
        value = _full_value(value, base_name, base_specs[base_name])
        same = read_base is not None and _same_bits(value, read_base(base_name))
        if base_name in updates:
            # A LoRA delta on top of a stored value: expressible only when that value is the base's.
            if not same:
                raise _malformed(
                    f"the adapter stores a full value of {base_name!r} ({KEY_PREFIX}{key}) and also LoRA factors for "
                    "it; that is a low_rank update of the base only if the stored value is the base's"
                    + (", and it is not" if read_base is not None else ": pass read_base= to check"),
                    path,
                )
            continue
        if not same:
            updates[base_name] = replace.encode(value)
    return dict(sorted(updates.items()))


def lora_updates_from_checkpoint(
    adapter_dir: str | os.PathLike[str], base_checkpoint_path: str | os.PathLike[str]
) -> dict[str, Update]:
    """:func:`lora_updates` against a base checkpoint file (any format of :mod:`mdiff.checkpoints`)."""
    from mdiff.checkpoints import open_checkpoint

    with open_checkpoint(base_checkpoint_path) as base:
        specs = {name: base.spec(name) for name in base.keys()}
        return lora_updates(adapter_dir, specs, read_base=base.read)
