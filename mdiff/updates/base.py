"""What every update type shares (SPEC.md §7.1) and the contract each type module fulfils.

``Update``, ``UpdateType``, the engine protocol, the base checks, and how runs of updates compose
(``Composition``, ``Change``, §13.4): ~530 lines that every type module and every applier read together."""

from __future__ import annotations

import hashlib
import math
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Generator, Iterable, Iterator, Mapping, Protocol, Sequence

import numpy as np

from mdiff.errors import ApplyError, InvalidFileError, LimitError
from mdiff.format.dtypes import DTYPES, DType, dtype_named, dtype_of
from mdiff.plugins import Registry

if TYPE_CHECKING:
    from mdiff.format.chunk_reader import DetachedDataset, PlannedDataset

SCHEMA_BASE_URI = "https://mdiff.dev/schemas/updates/"


def sha256_hex(array: np.ndarray) -> str:
    """SPEC.md §6.2: sha256 of a tensor's canonical bytes (little-endian, C order)."""
    flat = np.ascontiguousarray(array).reshape(-1)
    return hashlib.sha256(flat.view(np.uint8).data).hexdigest()


def empty_array(shape, dtype, path: str = "") -> np.ndarray:
    """``np.empty(shape, dtype)`` for a shape a file declares: MD508 instead of numpy's ValueError.

    The structure walk already refuses every shape over the limits of §8.3 (a dimension of 0
    counting as 1, so that [0, 2**62] is refused too); this keeps a shape that slipped past them,
    or limits configured beyond what numpy can address, from raising an untyped error.
    """
    try:
        return np.empty(shape, dtype=dtype)
    except (ValueError, OverflowError, TypeError) as exc:  # "array is too big", "Maximum allowed dimension exceeded"
        raise LimitError("MD508", f"a tensor of shape {list(shape)} cannot be allocated: {exc}", path) from None


def read_array(source: Any, dtype: np.dtype) -> np.ndarray:
    """A dataset's contents as a fresh array, or an in-memory array as it is.

    h5py datasets are read with ``read_direct`` into a preallocated array:
    several times faster than slicing, which page-faults a fresh buffer.
    """
    if isinstance(source, np.ndarray):
        return source
    out = empty_array(source.shape, dtype, source.name)
    if out.size:
        try:
            source.read_direct(out)
        except (OSError, ValueError) as exc:  # a chunk that does not decode, a checksum filter that fails
            raise InvalidFileError("MD513", f"dataset cannot be read: {exc}", source.name) from None
    return out


_PLANNED: "tuple[type[PlannedDataset], type[DetachedDataset]] | None" = None  # once stored_as_is has imported them


def stored_as_is(source: Any) -> bool:
    """Whether a dataset's stored bytes are its values, with nothing to decode: a contiguous dataset (no filters) read
    through the structure walk's plan, whose whole extent the walk checked lies within the file (§8.3, MD509).
    Reading it finds nothing a value rule could not see in the values themselves: no MD513 can come of it."""
    global _PLANNED
    if _PLANNED is None:  # imported once, not per parameter (a file may hold 10^5 of them)
        from mdiff.format.chunk_reader import DetachedDataset, PlannedDataset

        _PLANNED = (PlannedDataset, DetachedDataset)
    if not isinstance(source, _PLANNED):
        return False
    plan = source.plan
    return plan is not None and plan.contiguous_offset is not None


VALIDATION_BLOCK_BYTES = 64 << 20  # what a validator holds of one dataset at a time


def iter_blocks(source: Any, block_bytes: int = VALIDATION_BLOCK_BYTES) -> Iterator[np.ndarray]:
    """A dataset's elements in C order, as 1-D arrays of about ``block_bytes`` each: every stored byte is
    read and decoded (a chunk that does not inflate, or fails its checksum, is MD513), with memory bounded
    by a block and the chunks it touches. In-memory arrays give views."""
    if isinstance(source, np.ndarray):
        flat = source.reshape(-1)
        step = max(1, block_bytes // max(flat.itemsize, 1))
        for start in range(0, flat.size, step):
            yield flat[start:start + step]
        return
    shape = tuple(source.shape)
    if math.prod(shape) == 0:  # no bytes, yet a shape readers must be able to allocate (MD508)
        yield empty_array(shape, np.dtype(source.dtype), source.name).reshape(-1)
        return
    if math.prod(shape) * np.dtype(source.dtype).itemsize <= block_bytes:  # one block: one whole read, the
        yield read_array(source, np.dtype(source.dtype)).reshape(-1)  # walk's chunk map where it has one
        return
    try:
        if len(shape) == 0:
            yield np.asarray(source[()]).reshape(-1)
            return
        row = math.prod(shape[1:]) * np.dtype(source.dtype).itemsize
        rows = max(1, block_bytes // max(row, 1))
        for start in range(0, shape[0], rows):
            yield np.asarray(source[start:start + rows]).reshape(-1)
    except (OSError, ValueError) as exc:  # a chunk that does not decode, a checksum filter that fails
        raise InvalidFileError("MD513", f"dataset cannot be read: {exc}", source.name) from None


def update_schema(
    type_name: str, carries_sha256: bool, properties: Mapping[str, Any] = {}, required: Sequence[str] = (), version: int = 1,
    reads_base: bool = False, versions: Sequence[int] = (),
) -> dict:
    """The JSON Schema of one type's ``update`` attribute: the shared members plus the type's own.
    ``reads_base``: the type computes its result from the base's values, so it may name that base (§7.1).
    ``versions``: the type's versions, when it has several with the same members (one schema for all)."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"{SCHEMA_BASE_URI}{type_name}.schema.json",
        "title": f"mdiff `{type_name}` update (SPEC.md §7)",
        "type": "object",
        "required": ["type", "version", "shape", "dtype"] + (["sha256"] if carries_sha256 else []) + list(required),
        "additionalProperties": False,
        "properties": {
            "type": {"const": type_name},
            "version": {"enum": list(versions)} if versions else {"const": version},
            "shape": {"type": "array", "items": {"type": "integer", "minimum": 0}, "maxItems": 32},
            "dtype": {"enum": list(DTYPES)},
            **({"sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"}} if carries_sha256 else {}),
            **({"base_sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"}} if reads_base else {}),
            "lossy": {"type": "boolean"},
            "stats": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "changed": {"type": "integer", "minimum": 0},
                    "rel_change": {"type": "number", "minimum": 0},
                },
            },
            **properties,
        },
    }


@dataclass(frozen=True)
class Update:
    """One parameter's update: its ``update`` attribute and its datasets.

    ``data`` maps dataset names to arrays in their storage dtype: numpy
    arrays for an update about to be written, lazy h5py datasets for one
    read from a file (nothing is read until the update is applied).
    """

    meta: Mapping[str, Any]
    data: Mapping[str, Any]
    kind: "UpdateType | None" = None  # set for types a file defines itself (§7.8); else found in the registry


    @property
    def type(self) -> str:
        return self.meta["type"]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.meta["shape"])

    @property
    def dtype(self) -> DType:
        return dtype_named(self.meta["dtype"])

    @property
    def sha256(self) -> str | None:
        return self.meta.get("sha256")

    @property
    def base_sha256(self) -> str | None:
        """sha256 (§6.2) of the base value the update was made from, when the writer recorded it (§7.1, format 1.2)."""
        return self.meta.get("base_sha256")

    @property
    def stored_bytes(self) -> int:
        """Bytes of the datasets as declared (before compression)."""
        # math.prod, not numpy's reduction: ~10× less for the small shapes of a file of 10^5 parameters
        return sum(math.prod(d.shape) * np.dtype(d.dtype).itemsize for d in self.data.values())

    @property
    def update_type(self) -> "UpdateType":
        """The type's definition: a file's own (§7.8), else the one this process registered (:data:`TYPES`)."""
        return self.kind or TYPES[(self.type, self.meta.get("version", 1))]

    def array(self, name: str) -> np.ndarray:
        source = self.data[name]
        return read_array(source, np.dtype(source.dtype))

    def apply(
        self, base: np.ndarray | None, name: str, engine: "Engine", *, scratch: bool = False,
        verify: bool = True, check_base_sha256: bool = True,
    ) -> np.ndarray | None:
        """SPEC.md §9: the parameter after this update (None once deleted), verified; ``engine`` does the math.

        Engines are named by mdiff.engines, whose ``apply_update`` takes a name ("auto", "onnx",
        "numpy", a third party's). With ``scratch`` the base's buffer may be
        overwritten with the result (the caller owns it and needs it no more).
        ``verify=False`` leaves the sha256 check to the caller (:meth:`verify`), who MUST
        make it before the result is used other than as the base of a further XOR update.
        ``check_base_sha256=False`` skips the base's fingerprint (MD603), which a repository's replay
        may do: its commit ids already tie each commit to its first parent's state (§13.4). Where the
        result determines the base (``recover_base``), the fingerprint is left to :meth:`verify` (§9.2):
        a result that verifies proves its base, and only a failed one costs a hash of the base.
        """
        if isinstance(engine, str):  # the signature before engines were objects: say where names go
            raise TypeError(f"engine must be an Engine, not the name {engine!r}: mdiff.engines.apply_update takes names")
        kind = self.update_type
        if kind.needs_base:
            check_base(self, spec_of(base, name), name)
            if check_base_sha256 and base is not None and not self._verify_proves_base:
                check_base_fingerprint(self, base, name)
        result = engine.run(kind, self, base, scratch)
        if self.dtype.name == "bool" and result is not None:
            problem = next(bool_values_problems(result.view(np.uint8), "result"), None)
            if problem:
                raise InvalidFileError("MD409", "the update makes a bool value other than 0 or 1", name)
        if verify:
            self.verify(result, name)
        return result

    @property
    def _verify_proves_base(self) -> bool:
        """True when :meth:`verify` decides MD603 itself (§9.2): the result determines the base. Not for
        bool, whose result check (MD409) comes before verification and must not see a wrong base first."""
        return self.update_type.recover_base is not None and self.base_sha256 is not None and self.dtype.name != "bool"

    def verify(self, result: np.ndarray | None, name: str = "") -> None:
        """MD602 unless ``result`` is this update's result (for types that carry a sha256); MD603 first
        when the base it was computed from, recovered from ``result``, is not the one the update names."""
        if self.update_type.carries_sha256:
            if result is None:
                raise ApplyError("MD602", "the update has no result to check (a removed parameter)", name)
            got = sha256_hex(result)
            if got != self.sha256:
                recover_base = self.update_type.recover_base
                if recover_base is not None and self._verify_proves_base:
                    check_base_fingerprint(self, recover_base(self, result), name)
                raise ApplyError("MD602", f"result sha256 {got} differs from the update's {self.sha256}", name)


def with_data_read(update: Update) -> Update:
    """The same update with its datasets read into memory (for reading ahead on another thread)."""
    return Update(update.meta, {key: update.array(key) for key in update.data}, update.kind)


_READ_INLINE_BYTES = 64 << 10
_TOGETHER = 4096  # small updates read together at most
_TOGETHER_BYTES = 64 << 10  # what a small update's data is under


def _unread_by_its_check(update: Update) -> bool:
    """Whether `dense`'s check_data leaves this update's data unread (a non-bool delta stored as it is): not worth
    reading together either."""
    return update.type == "dense" and update.dtype.name != "bool" and stored_as_is(next(iter(update.data.values())))


def read_small_together(updates: Iterable[Update]) -> Iterator[Update]:
    """``updates``, in order, each small `dense` and `replace` one (under 64 KiB of data, not empty) with its data read
    into memory, thousands at a time with a pread or a few for all (chunk_reader.read_many: a file of 10^5 small
    parameters keeps them side by side), where they are read by a plan; the others as they are. A dataset that
    does not read is left as it was: whoever reads it gets its error, as without this. What a type's data check
    makes of an update is the same either way: the same values, one block."""
    from mdiff.format.chunk_reader import read_many

    def flush(batch: list[Update]) -> Iterator[Update]:
        wanted = [i for i, update in enumerate(batch) if (update.type == "dense" or update.type == "replace")
                  and (update.kind is None or update.kind is TYPES.get((update.type, update.meta.get("version", 1))))
                  and len(update.data) == 1 and not _unread_by_its_check(update)
                  and 0 < update.stored_bytes < _TOGETHER_BYTES]  # the cheaper questions first
        arrays, _ = read_many([next(iter(batch[i].data.values())) for i in wanted])
        for i, array in zip(wanted, arrays):
            if array is not None:
                batch[i] = Update(batch[i].meta, {next(iter(batch[i].data)): array}, batch[i].kind)
        yield from batch

    batch: list[Update] = []
    for update in updates:
        batch.append(update)
        if len(batch) >= _TOGETHER:
            yield from flush(batch)
            batch = []
    yield from flush(batch)


def read_ahead(items: Iterable[tuple[str, Update]], ahead_bytes: int = 0) -> Generator[tuple[str, Update], None, None]:
    """``items`` with each update's data read into memory, the next ones read on other cores meanwhile
    (inflating releases the GIL): the next one, and more while the declared bytes of those being read
    stay within ``ahead_bytes`` — many small updates (a run of sparse ones) keep every core inflating."""
    from mdiff.threads import shared_pool

    pending: deque[tuple[str, Future, int]] = deque()
    try:
        for name, update in items:
            if update.stored_bytes < _READ_INLINE_BYTES:  # a thread's hand-off costs more than such a read
                future: Future = Future()
                try:
                    future.set_result(with_data_read(update))
                except Exception as exc:  # raised in its turn, as a thread's would be
                    future.set_exception(exc)
            else:
                future = shared_pool().submit(with_data_read, update)
            pending.append((name, future, update.stored_bytes))
            while len(pending) > 1 and sum(nbytes for _, _, nbytes in pending) - pending[0][2] > ahead_bytes:
                done_name, done, _ = pending.popleft()
                yield done_name, done.result()
        while pending:
            done_name, done, _ = pending.popleft()
            yield done_name, done.result()
    finally:  # closed early (an error): let the reads in flight finish before their files are closed
        for _, future, _ in pending:
            if not future.cancel():
                future.exception()


def verify_all(checks: Iterable[tuple[Update, np.ndarray | None, str]]) -> None:
    """:meth:`Update.verify` of many results, hashed side by side (hashlib releases the GIL);
    the first failure in ``checks``' order is raised."""
    from mdiff.threads import shared_pool

    checks = list(checks)
    futures = [shared_pool().submit(update.verify, result, name) for update, result, name in checks]
    for future in futures:
        future.result()


def check_base(update: Update, spec: "tuple[tuple[int, ...], DType] | None", name: str) -> None:
    """MD600/MD601: the base holds the parameter with the shape and dtype the update expects."""
    if spec is None:
        raise ApplyError("MD600", f"the base has no parameter {name!r} for this {update.type} update", name)
    shape, dt = spec
    if tuple(shape) != update.shape or dt != update.dtype:
        raise ApplyError(
            "MD601",
            f"the base holds {dt.name}{list(shape)}; the update expects {update.dtype.name}{list(update.shape)}",
            name,
        )


def check_base_fingerprint(update: Update, base: np.ndarray, name: str) -> None:
    """MD603: the base value is the one the update was made from, when the update names it (§9.2)."""
    expected = update.base_sha256
    if expected is not None:
        got = sha256_hex(base)
        if got != expected:
            raise ApplyError(
                "MD603", f"the base is not the one this diff was made from: its {name!r} has sha256 {got[:12]}…, "
                         f"the diff was made from {expected[:12]}…", name,
            )


def spec_of(array: np.ndarray | None, name: str) -> "tuple[tuple[int, ...], DType] | None":
    if array is None:
        return None
    try:
        return tuple(array.shape), dtype_of(array)
    except KeyError:
        raise ApplyError("MD601", f"the base parameter has dtype {array.dtype}, which mdiff does not support", name) from None


# A check yields (code, dataset name or "", message).
Problem = tuple[str, str, str]


@dataclass(frozen=True)
class Composition:
    """How consecutive updates of one parameter merge into one change before their base is touched
    (SPEC.md §13.4). Updates whose compositions share a ``name`` compose with each other, and with no
    other; a run of them becomes one :class:`Change`, applied to the base once.

    XOR updates (dense and sparse, version 1) compose by XOR: ``base ⊕ d1 ⊕ d2 = base ⊕ (d1 ⊕ d2)``. A
    type whose change is an integer difference modulo 2^w composes by addition in the same way, under
    a name of its own. Both are commutative, which lets a run's sparse updates be folded position
    block by position block rather than update by update (:meth:`Change.fold`)."""

    name: str
    delta: Any  # the BitDelta whose fold and apply_folded do the arithmetic (bit_deltas.py)
    # A type that changes every element: (change, update, parameter name), folded into the change in place.
    fold: Callable[[np.ndarray, "Update", str], None] | None = None
    # The same type: (flat base bits, update, parameter name), the update applied to the base in place, with
    # fold's checks: what folding it alone into a change and applying that gives, in one pass over the base.
    apply: Callable[[np.ndarray, "Update", str], None] | None = None
    # A type that changes some elements: (update, parameter name, size) → (positions as int64, stored
    # deltas there), each checked as its apply checks it (InvalidFileError otherwise).
    entries: Callable[["Update", str, int], tuple[np.ndarray, np.ndarray]] | None = None


class Change:
    """A run of composing updates folded into one (§13.4): flat in C order at the parameter's storage
    width, in the form its kind's ``fold`` keeps (the XOR of the run, or the sum of its differences
    modulo 2^w); all zero bits, for each composition here, is the change that changes nothing.

    A sparse update's entries are held until a dense update, the end of the run or a bound on their
    bytes, then folded a cache-sized block of positions at a time, every held update's entries in that
    block in turn: folding each update across the whole change instead touches memory at random
    (100 updates of 1 % of a 4096×1024 float32 tensor: 61 ms update by update, 31 ms by blocks, measured alone)."""

    _BLOCK = 1 << 20  # elements of the change a block of the fold works in (4 MiB of float32: 31 ms there, 40 ms with 1 MiB)
    _HELD_BYTES = 64 << 20  # of sparse entries held before they are folded

    def __init__(self, composition: Composition, bits: np.ndarray | None, size: int | None = None):
        self.composition = composition
        self._bits = bits  # None until a second update comes (a run of one dense update is never folded)
        self._size = bits.size if bits is not None else int(size or 0)
        self._dtype = bits.dtype if bits is not None else None
        self._first: tuple[Update, str] | None = None  # a lone dense update, applied straight to the base
        self._held: list[tuple[np.ndarray, np.ndarray]] = []
        self._held_bytes = 0

    @property
    def bits(self) -> np.ndarray:
        self._fold_held()
        return self._folded()

    @classmethod
    def fold_first(cls, update: "Update", name: str) -> "Change":
        composition = update.update_type.composition
        if composition is None:
            raise ValueError(f"a {update.type} update does not compose")
        change = cls(composition, None, math.prod(update.shape))
        change._dtype = update.dtype.bits
        if composition.apply is not None:  # kept as it is: alone, it is applied to the base in one pass
            change._first = (update, name)
        else:
            change.fold(update, name)
        return change

    def _folded(self) -> np.ndarray:
        """The change as an array, the lone update kept so far folded into it."""
        if self._bits is None:
            self._bits = np.zeros(self._size, self._dtype)
        if self._first is not None:
            update, name = self._first
            self._first = None
            assert self.composition.fold is not None
            self.composition.fold(self._bits, update, name)
        return self._bits

    def fold(self, update: "Update", name: str) -> None:
        """The update's change added after those folded so far; refused (InvalidFileError) where the
        update's apply would refuse its data."""
        composition = update.update_type.composition
        if composition is None or composition.name != self.composition.name:
            raise ValueError(f"a {update.type} update does not compose with {self.composition.name} updates")
        if composition.entries is not None:
            at, values = composition.entries(update, name, self._size)
            self._held.append((at, values))
            self._held_bytes += at.nbytes + values.nbytes
            if self._held_bytes >= self._HELD_BYTES:
                self._fold_held()
        else:
            assert composition.fold is not None
            self._fold_held()
            composition.fold(self._folded(), update, name)

    def _fold_held(self, into: np.ndarray | None = None) -> None:
        """The held sparse entries folded into the change (or, with ``into``, straight into a base's flat
        bits: folding is applying, and both compositions commute, so the result is the same bits)."""
        if not self._held:
            return
        bits = self._folded() if into is None else into
        delta, size = self.composition.delta, self._size
        starts = np.arange(self._BLOCK, size, self._BLOCK)
        cuts = [(at, values, [0, *np.searchsorted(at, starts).tolist(), at.size]) for at, values in self._held]
        for block, start in enumerate(range(0, size, self._BLOCK)):
            window = bits[start:start + self._BLOCK]
            for at, values, cut in cuts:
                low, high = cut[block], cut[block + 1]
                if low < high:
                    where = at[low:high] - start
                    window[where] = delta.fold(window[where], values[low:high])
        self._held, self._held_bytes = [], 0

    def applied_to(self, base: np.ndarray) -> np.ndarray:
        """``base`` with the change applied, in its own buffer (the caller owns it). A run of one dense update
        is applied straight to it (refused, as its fold would be, with InvalidFileError), and so are sparse
        entries not yet folded into a change array: a change is applied once, what it held spent."""
        assert self._dtype is not None
        flat = base.view(self._dtype).reshape(-1)
        if self._bits is None:  # nothing folded into a dense change yet: no change array is made at all
            if self._first is not None:  # a lone dense update, in one pass over the base
                update, name = self._first
                self._first = None
                assert self.composition.apply is not None
                self.composition.apply(flat, update, name)
            self._fold_held(into=flat)  # sparse entries scattered into the base, block by block
            return base
        bits = self.bits
        self.composition.delta.apply_folded(flat, bits, out=flat)
        return base


@dataclass(frozen=True)
class UpdateType:
    """One registered update type: everything the format says about it, in one place."""

    name: str
    version: int
    carries_sha256: bool  # the result is bit-exact and its sha256 is in `update`
    needs_base: bool  # the parameter must exist in the base with the update's shape and dtype
    datasets: tuple[str, ...]  # the names of its datasets
    schema: dict
    check_meta: Callable[[Mapping[str, Any]], Iterator[Problem]]
    check_layout: Callable[[Mapping[str, Any], Mapping[str, tuple[tuple[int, ...], np.dtype]]], Iterator[Problem]]
    check_data: Callable[[Update], Iterator[Problem]]
    # The math, twice: in numpy, and as the normative ONNX models run through ``run`` (SPEC.md §7.9).
    # Both take (update, base, scratch); ``scratch`` lets them overwrite the base's buffer.
    apply_numpy: Callable[..., np.ndarray | None] | None  # (update, base or None, scratch); None: no numpy twin
    apply_onnx: Callable[..., np.ndarray | None]  # (update, base or None, runner, scratch)
    onnx_models: Callable[[], dict[str, Any]]  # model name → onnx.ModelProto
    # The engine `apply` uses unless told otherwise: the faster of the two, as tools/bench/engines.py measures.
    preferred_engine: str = "onnx"
    # How runs of these updates merge before the base is read (§13.4); None: applied one at a time.
    composition: Composition | None = None
    # The format minor version that defined this version of the type (§3.3): a writer writes at least
    # that version, and a file of an older version that uses it is refused (MD403). 0: in 1.0.
    since_minor: int = 0
    # For types that store a delta of bit patterns (`dense`, `sparse`): its arithmetic (bit_deltas.py),
    # by which consecutive updates of one parameter compose.
    delta: Any = None
    # (update, result) → the base value the result was computed from, for types whose result determines
    # the base (an invertible delta): their MD603 check may follow the result's (§9.2). None: it cannot.
    recover_base: Callable[..., np.ndarray] | None = None
    # (the bases' bit patterns or None, the stored values, the DType) → the results' bit patterns, for any number of
    # this type's updates of one dtype laid end to end, element by element: a run of small parameters applied in
    # one numpy call (applying._Batch; ``bits`` may be overwritten); None where the stored values are not of the
    # dtype the type stores (the run is then applied one by one, which says why). None: each applied alone.
    apply_together: Callable[..., np.ndarray | None] | None = None


class Runner(Protocol):
    """Runs normative model ``model`` on ``inputs``, writing its one output into ``output``."""

    def __call__(self, model: str, inputs: Mapping[str, np.ndarray], output: np.ndarray) -> None: ...

    def embedded(self, model_bytes: bytes, inputs: Mapping[str, np.ndarray], output: np.ndarray) -> None:
        """The same for a checked function a file embeds (§7.8); a function that fails to run raises
        RuntimeError or ValueError (mdiff.updates.embedded makes them MD428)."""


class Engine(Protocol):
    """Carries out an update type's math (SPEC.md §7.9): mdiff.engines names those this process has.

    ``run`` computes the result of ``update`` (of type ``kind``) on ``base`` and nothing more: the
    checks before and after are :meth:`Update.apply`'s. ``scratch``: the base's buffer may be overwritten."""

    @property
    def name(self) -> str: ...

    def run(self, kind: UpdateType, update: Update, base: np.ndarray | None, scratch: bool) -> np.ndarray | None: ...


class NumpyTwins:
    """The engine of the types' hand-written numpy twins (``UpdateType.apply_numpy``), which needs nothing
    above this floor; a type without a twin (an embedded one, §7.8) is refused (mdiff.engines' ``numpy``
    engine runs it on ONNX instead)."""

    name = "numpy"

    def run(self, kind: UpdateType, update: Update, base: np.ndarray | None, scratch: bool) -> np.ndarray | None:
        if kind.apply_numpy is None:
            raise ValueError(f"update type {kind.name!r} has no numpy twin")
        return kind.apply_numpy(update, base, scratch)


NUMPY_TWINS = NumpyTwins()

# SPEC.md §7.1's `type` column: names only the specification gives meaning to.
SPEC_TYPE_NAMES = frozenset({"dense", "sparse", "low_rank", "replace", "delete"})


def _check_registrable(kind: UpdateType) -> None:
    """A third party's type may not take a name of the specification's, nor of a file's own (§7.8: `x-`)."""
    if kind.name in SPEC_TYPE_NAMES or kind.name.startswith("x-"):
        raise ValueError(f"update type name {kind.name!r} is reserved: SPEC.md §7.1 and §7.8 give it its meaning")


# Every (name, version) of the update types this process knows other than a file's own (§7.8): the package
# mdiff.updates registers the built-in ones (Python imports it before this module is used), third parties
# theirs (mdiff.updates.register_type, or the entry-point group).
TYPES: Registry[tuple[str, int], UpdateType] = Registry(
    "mdiff.update_types", lambda kind: (kind.name, kind.version), "update type", _check_registrable)


def no_problems(*_args) -> Iterator[Problem]:
    return iter(())


def no_models() -> dict[str, Any]:
    return {}


def expect_datasets(
    expected: Mapping[str, tuple[tuple[int, ...] | None, np.dtype]],
    actual: Mapping[str, tuple[tuple[int, ...], np.dtype]],
    shapes: bool = True,
) -> Iterator[Problem]:
    """MD405–MD407 for datasets whose shape (None: any 1-D) and storage dtype are known in advance; without
    ``shapes``, MD405 and MD406 only."""
    for name, (shape, dtype) in expected.items():
        if name not in actual:
            yield ("MD405", name, f"dataset {name!r} is missing")
            continue
        got_shape, got_dtype = actual[name]
        if got_dtype != dtype:
            yield ("MD406", name, f"dataset {name!r} is {got_dtype.str}; it must be {dtype.str}")
        if not shapes:
            continue
        if shape is None:
            if len(got_shape) != 1:
                yield ("MD407", name, f"dataset {name!r} has shape {list(got_shape)}; it must be 1-D")
        elif tuple(got_shape) != tuple(shape):
            yield ("MD407", name, f"dataset {name!r} has shape {list(got_shape)}; it must be {list(shape)}")


def bool_has_version_1(meta: Mapping[str, Any]) -> Iterator[Problem]:
    """MD403: a `bool` parameter's `dense` or `sparse` update is version 1 (XOR, §7.3–§7.4)."""
    if meta.get("dtype") == "bool":
        yield ("MD403", "", f"a bool parameter's {meta.get('type')} update is version 1, not {meta.get('version')}")


def bool_values_problems(values: np.ndarray, dataset: str) -> Iterator[Problem]:
    """MD409: bool tensors hold only 0 and 1, also as XOR patterns."""
    if values.size and values.max() > 1:
        yield ("MD409", dataset, f"dataset {dataset!r} holds a bool value other than 0 or 1")
