"""The demo from start to end: train, commit, fine-tune three ways, merge, then prove every step.

Every check raises :class:`~mdiff.demo.DemoCheckFailed` when it does not hold, so a returned
:class:`DemoResult` is a demo whose checks all passed; it holds what the CLI shows.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

import mdiff
from mdiff.checkpoints import save_checkpoint
from mdiff.checkpoints.torch_pt import tensor_to_numpy
from mdiff.demo import DemoCheckFailed
from mdiff.demo import data as digits
from mdiff.demo import onnx_model, plot
from mdiff.demo import training as tr
from mdiff.demo.config import DemoConfig
from mdiff.format.dtypes import as_bits, dtype_of
from mdiff.repo import Repository
from mdiff.updates import low_rank as low_rank_type

PARAMETERS = ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias")
LABELS = ("root", "full-ft", "fish", "lora", "merge")


@dataclass
class CommitRow:
    """One commit and the proof that its checkout is the model that was trained."""

    label: str  # root, full-ft, fish, lora, merge
    commit_id: str
    branch: str  # the branch it was committed on
    message: str
    accuracy: float  # the trained model, on the held-out digits
    rotated_accuracy: float  # … and on the same digits rotated
    diff_bytes: int  # the commit's .mdiff file
    full_bytes: int  # the same state as a .safetensors checkpoint
    update_types: dict[str, int]  # update type → parameters
    exact: list[str]  # parameters stored exactly whose checkout has the trained value's sha256
    within_tolerance: list[str]  # low_rank parameters: checkout and trained value both within SPEC §7.5's tolerance
    low_rank_bit_equal: list[str]  # … of those, the ones whose checkout is bit for bit the trained value anyway
    max_abs_difference: float  # largest |checkout − trained| over all parameters (0.0 when all bit-equal)
    checkout_accuracy: float
    checkout_rotated_accuracy: float
    same_predictions: bool  # the checkout predicts exactly what the trained model predicts, on both sets
    relative_change: dict[str, float]  # ‖new − old‖ / ‖old‖ against the first parent (empty for the root)

    @property
    def verified(self) -> bool:
        return (len(self.exact) + len(self.within_tolerance) == len(PARAMETERS)
                and (self.checkout_accuracy, self.checkout_rotated_accuracy) == (self.accuracy, self.rotated_accuracy))


@dataclass
class OnnxCheck:
    """An ONNX model run on onnxruntime next to the PyTorch model of the same commit."""

    file: Path
    how: str
    label: str  # the commit whose state it holds
    accuracy: float
    rotated_accuracy: float
    torch_accuracy: float
    torch_rotated_accuracy: float
    same_predictions: bool
    max_logit_difference: float


@dataclass
class DemoResult:
    directory: Path
    config: DemoConfig
    rows: list[CommitRow]
    branches: dict[str, str]
    head_branch: str
    fish_masks: dict[str, np.ndarray]  # the FISH mask of every parameter (all False where none is kept)
    lora_scale: float
    merge_strategy: str
    merge_formula: str  # e.g. "0.5·full-ft + 0.5·lora"
    onnx: list[OnnxCheck]
    onnx_initializers_equal: bool  # root.onnx + the diffs of main's history == the exported final model
    plot_path: Path
    commit_files: list[Path]
    findings: dict[str, list]  # commit id → mdiff.validate findings (warnings only; errors raise)
    train_rows: int
    test_rows: int
    rotation_degrees: int
    seconds: float

    def row(self, label: str) -> CommitRow:
        return next(r for r in self.rows if r.label == label)


def _sha256(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def _bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(as_bits(np.ascontiguousarray(a)),
                                                                           as_bits(np.ascontiguousarray(b)))


def _dates(first: str):
    moment = _dt.datetime.strptime(first, "%Y-%m-%dT%H:%M:%SZ")
    while True:
        yield moment.strftime("%Y-%m-%dT%H:%M:%SZ")
        moment += _dt.timedelta(minutes=1)


def _switch(repo: Repository, branch: str, create_at: str | None = None) -> None:
    """``mdiff switch [-c] BRANCH``: create the branch at ``create_at`` if given, and make it current."""
    with repo.lock():
        if create_at is not None:
            repo.set_branch(branch, create_at)
        repo.set_head(branch)


def expected_merge(strategy: str, ours: np.ndarray, theirs: np.ndarray, base: np.ndarray) -> np.ndarray:
    """SPEC §13.7's strategies, written out again here (float64, one rounding) to check the merge commit."""
    name, _, arg = strategy.partition(":")
    o, t, b = (a.astype(np.float64) for a in (ours, theirs, base))
    if name == "average":
        merged = 0.5 * o + 0.5 * t
    elif name == "weighted":
        w = float(arg)
        merged = w * o + (1.0 - w) * t
    elif name == "task-arithmetic":
        lam = float(arg) if arg else 1.0
        merged = b + lam * ((o - b) + (t - b))
    else:
        raise ValueError(f"the demo merges with average, weighted:ALPHA or task-arithmetic[:λ], not {strategy!r}")
    return merged.astype(ours.dtype)


def merge_formula(strategy: str) -> str:
    """What ``strategy`` computes, in the demo's branch names."""
    name, _, arg = strategy.partition(":")
    if name == "average":
        return "0.5·full-ft + 0.5·lora"
    if name == "weighted":
        return f"{float(arg):g}·full-ft + {1 - float(arg):g}·lora"
    if name == "task-arithmetic":
        return f"root + {float(arg) if arg else 1.0:g}·((full-ft − root) + (lora − root))"
    raise ValueError(f"the demo merges with average, weighted:ALPHA or task-arithmetic[:λ], not {strategy!r}")


def _accuracy(model, x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    predictions = tr.logits(model, x).argmax(axis=1)
    return float(np.mean(predictions == y)), predictions


def run(directory, config: DemoConfig, report: Callable[[str], None] | None) -> DemoResult:
    started = time.perf_counter()
    say = report or (lambda message: None)
    directory = Path(directory)
    repo = Repository.init(directory)  # refuses an existing repository (MD801) before any training
    dates = _dates(config.date)

    def commit(state, message: str, meta: Mapping[str, str], **kwargs) -> str:
        return repo.commit(state, message, author=config.author, date=next(dates), meta=dict(meta), **kwargs)

    with tr.deterministic(config.seed):
        data = digits.load(config)
        x, y, rx = data.train_x, data.train_y, data.rotated_train_x
        fit = dict(lr=config.finetune_lr, batch_size=config.batch_size)
        arch = f"64→{config.hidden}→10"

        # 1. the base model, the root commit on main
        say(f"training the base MLP {arch} on {data.train_rows} digits ({config.base_epochs} epochs)")
        base = tr.train_base(x, y, config.hidden, config.base_epochs, config.lr, config.batch_size, seed=config.seed)
        models = {"root": base}
        ids = {"root": commit(base.state_dict(), f"root: MLP {arch} trained on 8x8 digits",
                              {"task": "digits", "epochs": str(config.base_epochs),
                               "optimizer": f"Adam lr={config.lr}"})}
        branch_of = {"root": "main"}
        states = {"root": tr.numpy_state(base)}
        task = {"task": f"digits rotated {data.rotation_degrees} degrees", "epochs": str(config.finetune_epochs)}

        # 2a. full fine-tuning: every parameter changes; mdiff picks dense or sparse per parameter
        say(f"full fine-tuning on rotated digits ({config.finetune_epochs} epochs) → branch full-ft")
        _switch(repo, "full-ft", ids["root"])
        models["full-ft"] = tr.full_finetune(base, rx, y, config.finetune_epochs, seed=config.seed + 10, **fit)
        states["full-ft"] = tr.numpy_state(models["full-ft"])
        ids["full-ft"] = commit(models["full-ft"].state_dict(), "full fine-tuning on rotated digits",
                                {**task, "method": "full fine-tuning"})
        branch_of["full-ft"] = "full-ft"
        with mdiff.open(repo.commit_path(ids["full-ft"])) as diff:
            types = {name: diff[name].type for name in diff}
        if set(types) != set(PARAMETERS) or not set(types.values()) <= {"dense", "sparse"}:
            raise DemoCheckFailed(f"full fine-tuning should store every parameter exactly (dense or sparse): {types}")

        # 2b. FISH mask: top fraction by empirical Fisher information, only those entries trained
        n = len(y) if config.fisher_samples is None else min(config.fisher_samples, len(y))
        say(f"FISH mask: empirical Fisher over {n} rotated digits, top {config.fish_fraction:.0%} of all parameters "
            "→ branch fish")
        fisher = tr.empirical_fisher(base, rx[:n], y[:n])
        masks = tr.fish_masks(fisher, config.fish_fraction)
        _switch(repo, "fish", ids["root"])
        models["fish"] = tr.fish_finetune(base, masks, rx, y, config.finetune_epochs, seed=config.seed + 20, **fit)
        states["fish"] = tr.numpy_state(models["fish"])
        for name, mask in masks.items():
            before, after = states["root"][name], states["fish"][name]
            if not _bits_equal(before[~mask], after[~mask]):
                raise DemoCheckFailed(f"FISH training changed {name} outside its mask")
        kept = {name: mask for name, mask in masks.items() if mask.any()}
        total_kept = sum(int(m.sum()) for m in masks.values())
        total = sum(m.size for m in masks.values())
        ids["fish"] = commit(states["fish"], f"FISH-mask sparse fine-tuning ({total_kept} of {total} entries)",
                             {**task, "method": "FISH mask", "fraction": str(config.fish_fraction),
                              "fisher_samples": str(n), "kept": str(total_kept)}, masks=kept)
        branch_of["fish"] = "fish"
        with mdiff.open(repo.commit_path(ids["fish"])) as diff:
            if set(diff) != set(kept):
                raise DemoCheckFailed(f"the FISH commit holds {sorted(diff)}, the mask covers {sorted(kept)}")
            for name, mask in kept.items():
                update = diff[name]
                stored = update.array("indices") if update.type == "sparse" else None
                if stored is None or not np.array_equal(stored, np.flatnonzero(mask.reshape(-1))):
                    raise DemoCheckFailed(f"the FISH commit's sparse indices of {name} are not its mask")
                if update.meta.get("lossy"):
                    raise DemoCheckFailed(f"the FISH commit dropped changes of {name} outside the mask")

        # 2c. LoRA on both linear layers, committed as the explicit factors (SPEC §7.5)
        scale = config.lora_alpha / config.lora_rank
        say(f"LoRA r={config.lora_rank} alpha={config.lora_alpha:g} on fc1 and fc2 → branch lora")
        _switch(repo, "lora", ids["root"])
        layers, models["lora"] = tr.lora_finetune(base, rx, y, config.lora_rank, config.lora_alpha,
                                                  config.finetune_epochs, seed=config.seed + 30, **fit)
        states["lora"] = tr.numpy_state(models["lora"])  # W + scale·(B @ A) in float32, biases untouched
        explicit = {}
        for layer_name, layer in layers.items():
            weight = f"{layer_name}.weight"
            explicit[weight] = mdiff.low_rank(
                tensor_to_numpy(layer.lora_B), tensor_to_numpy(layer.lora_A),  # §7.5: A = lora_B, B = lora_A
                states["root"][weight].shape, dtype_of(states["root"][weight]), scale)
        ids["lora"] = commit(states["lora"], f"LoRA r={config.lora_rank} on fc1, fc2 (merged: W + {scale:g}·B@A)",
                             {**task, "method": "LoRA", "rank": str(config.lora_rank),
                              "alpha": str(config.lora_alpha)}, explicit=explicit)
        branch_of["lora"] = "lora"
        with mdiff.open(repo.commit_path(ids["lora"])) as diff:
            types = {name: diff[name].type for name in diff}
        if types != {f"{layer}.weight": "low_rank" for layer in tr.LINEAR_LAYERS}:
            raise DemoCheckFailed(f"the LoRA commit should hold low_rank updates of the linear layers only: {types}")

        # 2d. main: fast-forward to full-ft, then merge lora into it
        say(f"merging lora into main (= full-ft) with --strategy {config.merge_strategy}")
        _switch(repo, "main")
        with repo.lock():
            repo.set_branch("main", ids["full-ft"])  # a fast-forward, as git merge --ff: main had only the root
        merge_id, conflicts = repo.merge("lora", config.merge_strategy,
                                         f"merge lora into main ({config.merge_strategy})",
                                         config.author, next(dates), {"method": "merge"})
        if conflicts:
            raise DemoCheckFailed(f"the merge has conflicts: {conflicts}")
        ids["merge"] = merge_id
        branch_of["merge"] = "main"
        checkouts = {label: repo.checkout(ids[label]) for label in LABELS[:-1]}
        states["merge"] = {name: expected_merge(config.merge_strategy, states["full-ft"][name],
                                                checkouts["lora"][name], states["root"][name])
                           for name in PARAMETERS}
        models["merge"] = tr.model_from_state(states["merge"], config.hidden)
        checkouts["merge"] = repo.checkout(ids["merge"])

        # 3. every commit: accuracy, sizes, update types, checkout proof
        say("checking out every commit and comparing it with the trained model")
        rows = []
        with tempfile.TemporaryDirectory() as tmp:
            for label in LABELS:
                rows.append(_row(repo, label, ids, branch_of, states, models, checkouts, data, config, Path(tmp)))

        # ONNX: export, apply diffs to the initializers, run on onnxruntime
        say("exporting ONNX models and applying diffs to their initializers")
        onnx_checks, initializers_equal = _onnx(repo, directory / "onnx", ids, checkouts, data, config)

        # validate every commit file; plot
        findings = {}
        for cid in repo.commit_ids():
            found = mdiff.validate(repo.commit_path(cid))
            errors = [f for f in found if f.is_error]
            if errors:
                raise DemoCheckFailed(f"commit {cid[:12]} is invalid: {errors[0].code} {errors[0].message}")
            findings[cid] = found
        plot_path = directory / "relative-change.png"
        plot.relative_change_png(
            plot_path, PARAMETERS, {r.label: r.relative_change for r in rows if r.relative_change},
            f"mdiff demo: relative change per parameter against the first parent ({arch} MLP)")

    branch, _ = repo.head()
    expected_branches = {"main": ids["merge"], "full-ft": ids["full-ft"], "fish": ids["fish"], "lora": ids["lora"]}
    if repo.branches() != expected_branches or len(repo.commit_ids()) != len(LABELS):
        raise DemoCheckFailed(f"unexpected repository: branches {repo.branches()}, {len(repo.commit_ids())} commits")
    return DemoResult(
        directory=directory, config=config, rows=rows, branches=repo.branches(), head_branch=branch or "",
        fish_masks=masks, lora_scale=scale, merge_strategy=config.merge_strategy,
        merge_formula=merge_formula(config.merge_strategy), onnx=onnx_checks,
        onnx_initializers_equal=initializers_equal, plot_path=plot_path,
        commit_files=[repo.commit_path(ids[label]) for label in LABELS], findings=findings,
        train_rows=data.train_rows, test_rows=len(data.test_y), rotation_degrees=data.rotation_degrees,
        seconds=time.perf_counter() - started,
    )


def _row(repo, label, ids, branch_of, states, models, checkouts, data, config, tmp: Path) -> CommitRow:
    cid = ids[label]
    trained, checkout = states[label], checkouts[label]
    parents = repo.parents(cid)
    parent_state = repo.checkout(parents[0]) if parents else None
    if set(checkout) != set(trained):
        raise DemoCheckFailed(f"{label}: the checkout has parameters {sorted(checkout)}, the model {sorted(trained)}")
    exact, tolerance, bit_equal, largest = [], [], [], 0.0
    with mdiff.open(repo.commit_path(cid)) as diff:
        types = dict(sorted(Counter(diff[name].type for name in diff).items()))
        for name in PARAMETERS:
            largest = max(largest, float(np.max(np.abs(checkout[name].astype(np.float64) - trained[name]))))
            same = _sha256(checkout[name]) == _sha256(trained[name]) and _bits_equal(checkout[name], trained[name])
            if name in diff and diff[name].type == "low_rank":
                # §7.5 promises the result within a tolerance, not bit for bit: the trained (PyTorch)
                # merge W + scale·(B @ A) and the checkout must both be within it of the exact value.
                update = diff[name]
                if not (low_rank_type.within_tolerance(checkout[name], parent_state[name], update)
                        and low_rank_type.within_tolerance(trained[name], parent_state[name], update)):
                    raise DemoCheckFailed(f"{label}: {name} is outside SPEC §7.5's low_rank tolerance")
                tolerance.append(name)
                if same:
                    bit_equal.append(name)
            elif same:
                exact.append(name)
            else:
                raise DemoCheckFailed(f"{label}: the checkout of {name} is not the trained value (sha256 differs)")
    accuracy, predictions = _accuracy(models[label], data.test_x, data.test_y)
    rotated, rotated_predictions = _accuracy(models[label], data.rotated_test_x, data.test_y)
    restored = tr.model_from_state(checkout, config.hidden)
    checkout_accuracy, checkout_predictions = _accuracy(restored, data.test_x, data.test_y)
    checkout_rotated, checkout_rotated_predictions = _accuracy(restored, data.rotated_test_x, data.test_y)
    if (checkout_accuracy, checkout_rotated) != (accuracy, rotated):
        raise DemoCheckFailed(f"{label}: the checkout's accuracy {checkout_accuracy:.4f}/{checkout_rotated:.4f} "
                              f"is not the trained model's {accuracy:.4f}/{rotated:.4f}")
    full = tmp / f"{label}.safetensors"
    save_checkpoint(full, trained)
    change = {}
    if parent_state is not None:
        for name in PARAMETERS:
            old = parent_state[name].astype(np.float64)
            change[name] = float(np.linalg.norm(checkout[name].astype(np.float64) - old) / np.linalg.norm(old))
    return CommitRow(
        label=label, commit_id=cid, branch=branch_of[label], message=repo.metadata(cid).message,
        accuracy=accuracy, rotated_accuracy=rotated, diff_bytes=repo.commit_path(cid).stat().st_size,
        full_bytes=full.stat().st_size, update_types=types, exact=exact, within_tolerance=tolerance,
        low_rank_bit_equal=bit_equal, max_abs_difference=largest, checkout_accuracy=checkout_accuracy,
        checkout_rotated_accuracy=checkout_rotated,
        same_predictions=bool(np.array_equal(predictions, checkout_predictions)
                              and np.array_equal(rotated_predictions, checkout_rotated_predictions)),
        relative_change=change,
    )


def _onnx(repo, folder: Path, ids, checkouts, data, config) -> tuple[list[OnnxCheck], bool]:
    folder.mkdir(parents=True, exist_ok=True)
    root, final = folder / "root.onnx", folder / "main.onnx"
    onnx_model.save(checkouts["root"], root)
    onnx_model.save(checkouts["merge"], final)
    mdiff.apply_files(root, repo.commit_path(ids["fish"]), folder / "fish.onnx")
    mdiff.apply_files(root, repo.commit_path(ids["full-ft"]), folder / "full-ft.onnx")
    mdiff.apply_files(folder / "full-ft.onnx", repo.commit_path(ids["merge"]), folder / "main-from-diffs.onnx")
    exported, applied = onnx_model.initializers(final), onnx_model.initializers(folder / "main-from-diffs.onnx")
    initializers_equal = set(exported) == set(applied) and all(_bits_equal(exported[k], applied[k]) for k in exported)
    if not initializers_equal:
        raise DemoCheckFailed("root.onnx + the full-ft and merge diffs is not the exported final model")
    checks = []
    for file, how, label in (
        (final, "exported with onnx.helper from main's checkout (the merge)", "merge"),
        (folder / "fish.onnx", "mdiff.apply_files(root.onnx, <fish commit>.mdiff)", "fish"),
        (folder / "main-from-diffs.onnx", "root.onnx + full-ft diff + merge diff (mdiff.apply_files twice)", "merge"),
    ):
        torch_model = tr.model_from_state(checkouts[label], config.hidden)
        results = []
        for x in (data.test_x, data.rotated_test_x):
            ort_logits, torch_logits = onnx_model.run(file, x), tr.logits(torch_model, x)
            results.append((ort_logits.argmax(1), torch_logits.argmax(1),
                            float(np.max(np.abs(ort_logits - torch_logits)))))
        same = all(np.array_equal(a, b) for a, b, _ in results)
        if not same:
            raise DemoCheckFailed(f"{file.name} on onnxruntime predicts differently from PyTorch")
        checks.append(OnnxCheck(
            file=file, how=how, label=label,
            accuracy=float(np.mean(results[0][0] == data.test_y)),
            rotated_accuracy=float(np.mean(results[1][0] == data.test_y)),
            torch_accuracy=float(np.mean(results[0][1] == data.test_y)),
            torch_rotated_accuracy=float(np.mean(results[1][1] == data.test_y)),
            same_predictions=same, max_logit_difference=max(r[2] for r in results),
        ))
    return checks, initializers_equal
