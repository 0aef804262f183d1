"""The demo from start to end: train, commit, fine-tune three ways, merge, then prove every commit.

Every check raises :class:`~mdiff.demo.errors.DemoCheckFailed` when it does not hold, so a returned
:class:`DemoResult` is a demo whose checks all passed; it holds what the CLI shows.

The directory it fills::

    DIR/.mdiff/              the repository
    DIR/base/                the base model as save_pretrained wrote it (sharded), committed as the root
    DIR/runs/finetune/       the Trainer's checkpoints (checkpoint-<step>/), each committed by MdiffCallback
    DIR/runs/lora/adapter/   the PEFT adapter, imported with repo.import_peft
    DIR/checkouts/<commit>/  every commit checked out as a model folder, reloaded with from_pretrained
    DIR/relative-change.png  the relative change per parameter of each commit, on a log scale
"""

from __future__ import annotations

import fnmatch
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np
import torch

import mdiff
from mdiff.checkpoints.folder import TRAINING_STATE
import mdiff.demo.data as digits
import mdiff.demo.plot as plot
import mdiff.demo.training as tr
from mdiff.demo.config import DemoConfig
from mdiff.demo.errors import DemoCheckFailed
from mdiff.repo import Repository
from mdiff.updates import low_rank as low_rank_type
from mdiff.updates.sparse import positions_of

T = TypeVar("T")


@dataclass
class Proof:
    """How a commit's checkout was shown to be the model that was trained."""

    source: str  # what the checkout is compared with (a folder, a state dict, PEFT's merge, the expected merge)
    identical_files: list[str]  # files of the checkout byte-identical to the committed folder's (folder commits)
    exact: list[str]  # parameters bit-identical to the source's
    within_tolerance: list[str]  # low_rank parameters: checkout and source both within SPEC §7.5's tolerance
    logits_equal: bool  # the reloaded checkout's logits are the source model's, bit for bit (predictions always are)
    max_logit_difference: float


@dataclass
class CommitRow:
    """One commit: how it was made, what it stores, and the proof that its checkout is what was trained."""

    label: str  # base, step <N>, fish, lora, merge
    commit_id: str
    branch: str
    message: str
    meta: dict[str, str]
    accuracy: float  # the model reloaded from the checkout, on the held-out digits
    shifted_accuracy: float  # … and on the same digits one pixel lower
    diff_bytes: int  # the commit's .mdiff file
    full_bytes: int  # the checkpoint's weight files (*.safetensors): what git-lfs stores for this commit
    update_types: dict[str, int]  # update type → parameters
    files: dict[str, str]  # files of the model folder the commit stores: path → replace | delete
    commit_seconds: float
    checkout_seconds: float  # repo.checkout(commit, folder)
    proof: Proof
    relative_change: dict[str, float] = field(default_factory=dict)  # ‖new − old‖/‖old‖ against the first parent


@dataclass
class DemoResult:
    directory: Path
    config: DemoConfig
    model: str  # the architecture, in words
    rows: list[CommitRow]
    branches: dict[str, str | None]
    head_branch: str
    fish_masks: dict[str, np.ndarray]  # the FISH mask of every parameter (all False where none is kept)
    lora_scale: float
    merge_formula: str  # e.g. "0.5·finetune + 0.5·lora"
    plot_path: Path
    commit_files: list[Path]  # in the order of rows
    findings: dict[str, list]  # commit id → mdiff.validate findings (warnings only; errors raise)
    repository_bytes: int  # everything under DIR/.mdiff: commits, snapshots, refs
    train_rows: int
    test_rows: int
    seconds: float

    def row(self, label: str) -> CommitRow:
        return next(r for r in self.rows if r.label == label)


@dataclass
class _Trained:
    """What a commit should hold: the state that was trained (or computed), a model of it, and the folder
    that was committed, if one was."""

    label: str
    commit_id: str
    branch: str
    commit_seconds: float
    source: str
    model: torch.nn.Module
    folder: Path | None = None


@dataclass
class _Inputs:
    test: torch.Tensor
    test_shifted: torch.Tensor
    labels: np.ndarray


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
        return "0.5·finetune + 0.5·lora"
    if name == "weighted":
        return f"{float(arg):g}·finetune + {1 - float(arg):g}·lora"
    if name == "task-arithmetic":
        return f"base + {float(arg) if arg else 1.0:g}·((finetune − base) + (lora − base))"
    raise ValueError(f"the demo merges with average, weighted:ALPHA or task-arithmetic[:λ], not {strategy!r}")


def _numpy_state(model: torch.nn.Module) -> dict[str, np.ndarray]:
    return {name: t.detach().cpu().contiguous().numpy().copy() for name, t in model.state_dict().items()}


def _bits_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _switch(repo: Repository, branch: str, create_at: str | None = None) -> None:
    """``mdiff switch [-c] BRANCH [START]``: create the branch at ``create_at`` if given, and make it current."""
    repo.switch(branch, create=create_at is not None, start=create_at)


def _timed(action: Callable[[], T]) -> tuple[T, float]:
    started = time.perf_counter()
    result = action()
    return result, time.perf_counter() - started


def _folder_files(folder: Path) -> dict[str, Path]:
    return {p.relative_to(folder).as_posix(): p for p in sorted(folder.rglob("*")) if p.is_file()}


def run(repo: Repository, config: DemoConfig, report: Callable[[str], None] | None) -> DemoResult:
    started = time.perf_counter()
    say = report or (lambda message: None)
    directory = repo.root
    base_dir, runs, checkouts = directory / "base", directory / "runs", directory / "checkouts"
    dates = tr.fixed_dates(config.date)
    author = config.author

    with tr.quiet_and_deterministic(config.seed):
        data = digits.load(config)
        tokenizer = digits.build_tokenizer()

        def encode(texts):
            return digits.encode(tokenizer, texts)

        inputs = _Inputs(encode(data.test_text), encode(data.test_shifted_text), data.test_labels)
        upright = tr.Examples(encode(data.train_text), data.train_labels)
        shifted = tr.Examples(encode(data.train_shifted_text), data.train_labels)
        say(f"the digits as text, a word per pixel row: the held-out {data.test_labels[0]} reads "
            f"\"{data.test_text[0]}\"; {len(data.train_labels)} training and {len(data.test_labels)} held-out "
            "digits, upright and one pixel lower")

        # 1. the base: trained from scratch, saved sharded with save_pretrained, committed as a folder
        model = tr.new_model(config)
        architecture = tr.describe_model(config, model)
        say(f"training the base, a {architecture} built from a BertConfig, with the Trainer: "
            f"{config.base_steps} steps at lr {config.base_lr:g}")
        tr.train_base(config, model, upright, runs / "base")
        model.save_pretrained(base_dir, max_shard_size=config.shard_size)
        tokenizer.save_pretrained(base_dir)
        summary, seconds = _timed(lambda: repo.make_commit(
            base_dir, f"base: {architecture} trained on 8x8 digits", author, next(dates),
            {"task": "digits", "steps": str(config.base_steps), "learning_rate": f"{config.base_lr:g}"}))
        assert summary is not None
        shards = sorted(p.name for p in base_dir.glob("model*.safetensors"))
        say(f"saved base/ ({len(shards)} shards, index, config, tokenizer) and committed the folder on main: "
            f"{summary.commit_id[:12]}, {summary.line()}")
        root = summary.commit_id
        trained = [_Trained("base", root, "main", seconds, "base/", tr.load_model(base_dir), base_dir)]

        # 2. full fine-tuning with the Trainer; MdiffCallback commits each save on branch finetune
        say(f"full fine-tuning on the shifted digits with the Trainer: {config.finetune_steps} steps at lr "
            f"{config.finetune_lr:g}, a save every {config.save_steps} steps → MdiffCallback commits it on "
            "branch finetune")
        callback = tr.TimedCallback(directory, dates, branch="finetune", author=author,
                                    message="fine-tune on shifted digits, step {step}")
        tr.full_finetune(config, base_dir, shifted, runs / "finetune", tokenizer, callback)
        for commit_id in callback.commits:
            step = repo.metadata(commit_id).meta["step"]
            folder = runs / "finetune" / f"checkpoint-{step}"
            trained.append(_Trained(f"step {step}", commit_id, "finetune", callback.seconds[commit_id],
                                    f"runs/finetune/checkpoint-{step}/", tr.load_model(folder), folder))
        if len(callback.commits) != config.finetune_steps // config.save_steps:
            raise DemoCheckFailed(f"the Trainer saved {config.finetune_steps // config.save_steps} checkpoints, "
                                  f"MdiffCallback committed {len(callback.commits)}")

        last_step = trained[-1]

        # 3. FISH mask sparse fine-tuning in a plain loop; the state dict committed with the mask
        masks, fish = _fish(repo, config, base_dir, shifted, root, next(dates), say)
        trained.append(fish)

        # 4. LoRA with PEFT, imported as low_rank updates
        lora, scale = _lora(repo, config, base_dir, shifted, runs / "lora", root, next(dates), say)
        trained.append(lora)

        # 5. main: fast-forward to the fine-tune, then merge lora into it
        say(f"main: fast-forwarded to finetune, then `merge lora --strategy {config.merge_strategy} --all` "
            "(every parameter weighted, a model soup; a plain merge is three-way)")
        _switch(repo, "main")
        fast_forward = repo.merge("finetune").commit  # main had only the root: the branch moves, no merge commit
        if fast_forward != callback.commits[-1]:
            raise DemoCheckFailed("main did not fast-forward to finetune")
        result, seconds = _timed(lambda: repo.merge(
            "lora", config.merge_strategy, f"merge lora into main ({config.merge_strategy})", author, next(dates),
            {"method": "merge"}, everything=True))
        merge_id = result.commit
        if result.conflicts or merge_id is None:
            raise DemoCheckFailed(f"the merge has conflicts: {result.conflicts}")
        ours, base = _numpy_state(last_step.model), _numpy_state(trained[0].model)
        theirs = repo.checkout(lora.commit_id)  # lora as mdiff applies it, which is what the merge reads
        merged = {name: torch.from_numpy(expected_merge(config.merge_strategy, ours[name], theirs[name], base[name]))
                  for name in ours}
        trained.append(_Trained("merge", merge_id, "main", seconds, f"{merge_formula(config.merge_strategy)}, "
                                "computed here", tr.model_from_state(config, merged)))

        # 6. every commit: check out, reload, compare
        say("checking out every commit to checkouts/, reloading it with from_pretrained and comparing it "
            "with what was trained")
        states: dict[str, dict[str, np.ndarray]] = {}
        checkouts.mkdir(exist_ok=True)
        rows = [_prove(repo, t, checkouts / t.label.replace(" ", "-"), inputs, states) for t in trained]

        findings = {}
        for commit_id in repo.commit_ids():
            found = mdiff.validate(repo.commit_path(commit_id))
            errors = [f for f in found if f.is_error]
            if errors:
                raise DemoCheckFailed(f"commit {commit_id[:12]} is invalid: {errors[0].code} {errors[0].message}")
            findings[commit_id] = found
        plot_path = directory / "relative-change.png"
        plot.relative_change_png(plot_path, list(states[root]), {r.label: r.relative_change for r in rows[1:]},
                                 f"mdiff demo: relative change per parameter against the first parent — {architecture}")

    expected = {"main": merge_id, "finetune": callback.commits[-1], "fish": fish.commit_id, "lora": lora.commit_id}
    if repo.branches() != expected or len(repo.commit_ids()) != len(rows):
        raise DemoCheckFailed(f"unexpected repository: branches {repo.branches()}, {len(repo.commit_ids())} commits")
    return DemoResult(
        directory=directory, config=config, model=architecture,
        rows=rows, branches=repo.branches(),
        head_branch=repo.head()[0] or "", fish_masks=masks, lora_scale=scale,
        merge_formula=merge_formula(config.merge_strategy), plot_path=plot_path,
        commit_files=[repo.commit_path(r.commit_id) for r in rows], findings=findings,
        repository_bytes=sum(p.stat().st_size for p in repo.dir.rglob("*") if p.is_file()),
        train_rows=len(data.train_labels), test_rows=len(data.test_labels), seconds=time.perf_counter() - started,
    )


def _fish(repo: Repository, config: DemoConfig, base_dir: Path, shifted: tr.Examples, root: str, date: str,
          say: Callable[[str], None]) -> tuple[dict[str, np.ndarray], _Trained]:
    """FISH on branch fish: the mask from the empirical Fisher, AdamW on the masked entries only, and
    ``repo.commit(model.state_dict(), masks=…)`` — whose sparse updates must hold exactly the mask."""
    n = min(config.fisher_samples, len(shifted))
    model = tr.load_model(base_dir)
    masks = tr.fish_masks(tr.empirical_fisher(model, shifted.input_ids[:n], shifted.labels[:n].numpy()),
                          config.fish_fraction)
    kept = {name: mask for name, mask in masks.items() if mask.any()}
    total_kept, total = sum(int(m.sum()) for m in masks.values()), sum(m.size for m in masks.values())
    say(f"FISH mask: empirical Fisher over {n} shifted digits, the top {config.fish_fraction:.0%} of all entries "
        f"({total_kept:,} of {total:,}, in {len(kept)} of {len(masks)} parameters); {config.fish_steps} steps at lr "
        f"{config.fish_lr:g} in a plain PyTorch loop → branch fish")
    before = _numpy_state(model)
    tr.masked_finetune(config, model, masks, shifted.input_ids, shifted.labels.numpy())
    after = _numpy_state(model)
    for name, mask in masks.items():
        if not _bits_equal(before[name][~mask], after[name][~mask]):
            raise DemoCheckFailed(f"FISH training changed {name} outside its mask")
    _switch(repo, "fish", root)
    summary, seconds = _timed(lambda: repo.make_commit(
        model.state_dict(), f"FISH-mask sparse fine-tuning ({total_kept} of {total} entries)", config.author, date,
        {"task": "shifted digits", "method": "FISH mask", "fraction": f"{config.fish_fraction:g}",
         "fisher_samples": str(n), "steps": str(config.fish_steps), "learning_rate": f"{config.fish_lr:g}"},
        masks=kept))
    assert summary is not None
    restored = repo.checkout(summary.commit_id, framework="pt")  # torch tensors, as load_state_dict takes them
    reloaded = _numpy_state(tr.model_from_state(config, restored))
    if any(not _bits_equal(reloaded[name], value) for name, value in after.items()):
        raise DemoCheckFailed("the FISH commit's checkout, loaded with load_state_dict(strict=True), is not the model")
    say(f"committed model.state_dict() with masks=: {summary.commit_id[:12]}, {summary.line()}; "
        "checkout(framework=\"pt\") loads back with load_state_dict(strict=True), bit for bit")
    with mdiff.open(repo.commit_path(summary.commit_id)) as diff:
        if set(diff) != set(kept):
            raise DemoCheckFailed(f"the FISH commit holds {sorted(diff)}, the mask covers {sorted(kept)}")
        for name, mask in kept.items():
            update = diff[name]
            if update.type != "sparse" or not np.array_equal(positions_of(update), np.flatnonzero(mask)):
                raise DemoCheckFailed(f"the FISH commit's update of {name} does not store exactly its mask")
            if update.meta.get("lossy"):
                raise DemoCheckFailed(f"the FISH commit dropped changes of {name} outside the mask")
    return masks, _Trained("fish", summary.commit_id, "fish", seconds, "model.state_dict()", model)


def _lora(repo: Repository, config: DemoConfig, base_dir: Path, shifted: tr.Examples, output_dir: Path, root: str,
          date: str, say: Callable[[str], None]) -> tuple[_Trained, float]:
    """LoRA on branch lora: PEFT trains it, ``repo.import_peft`` commits the adapter; the model it should
    give is PEFT's own ``merge_and_unload()``."""
    scale = config.lora_alpha / config.lora_rank
    say(f"LoRA r={config.lora_rank} alpha={config.lora_alpha:g} on {', '.join(tr.LORA_TARGETS)} with PEFT "
        f"(the classifier trained in full): {config.lora_steps} steps at lr {config.lora_lr:g} → branch lora")
    peft_model = tr.lora_finetune(config, base_dir, shifted, output_dir)
    _switch(repo, "lora", root)
    made, seconds = _timed(lambda: repo.import_peft(
        output_dir / "adapter", base_dir, f"LoRA r={config.lora_rank} on {', '.join(tr.LORA_TARGETS)} (PEFT adapter)",
        config.author, date, {"task": "shifted digits", "method": "LoRA", "rank": str(config.lora_rank),
                              "alpha": f"{config.lora_alpha:g}", "steps": str(config.lora_steps),
                              "learning_rate": f"{config.lora_lr:g}"}))
    commit_id = made[-1]
    with mdiff.open(repo.commit_path(commit_id)) as diff:
        types = {name: diff[name].type for name in diff}
    targets = {name for name in types if name.rsplit(".", 2)[-2] in tr.LORA_TARGETS}
    if ({types[n] for n in targets} != {"low_rank"} or len(targets) != 2 * config.layers
            or {types[n] for n in set(types) - targets} != {"replace"}):
        raise DemoCheckFailed(f"the LoRA commit should hold low_rank updates of query and value and the "
                              f"classifier replaced: {types}")
    say(f"saved the adapter to runs/lora/adapter/ and imported it: {commit_id[:12]}, "
        f"{', '.join(f'{n} {t}' for t, n in sorted(Counter(types.values()).items()))}")
    merged = peft_model.merge_and_unload().eval()
    return _Trained("lora", commit_id, "lora", seconds, "PEFT's merge_and_unload()", merged), scale


def _prove(repo: Repository, trained: _Trained, out: Path, inputs: _Inputs,
           states: dict[str, dict[str, np.ndarray]]) -> CommitRow:
    """Check ``trained``'s commit out to ``out``, reload it with from_pretrained and compare it with what
    was trained: files byte for byte, parameters bit for bit (low_rank: within §7.5's tolerance),
    logits and predictions. ``states`` collects each commit's state, for its children's checks."""
    commit_id = trained.commit_id
    _, checkout_seconds = _timed(lambda: repo.checkout(commit_id, out))
    checkout = tr.load_model(out)
    got = states[commit_id] = _numpy_state(checkout)
    want = _numpy_state(trained.model)
    label = trained.label
    if set(got) != set(want):
        raise DemoCheckFailed(f"{label}: the checkout has parameters {sorted(got)}, the model {sorted(want)}")
    parents = repo.parents(commit_id)
    parent = states[parents[0]] if parents else None

    exact, tolerance = [], []
    with mdiff.open(repo.commit_path(commit_id)) as diff:
        update_types = dict(sorted(Counter(diff[name].type for name in diff).items()))
        files = {path: update.type for path, update in diff.files.items()}
        for name in got:
            if name in diff and diff[name].type == "low_rank" and parent is not None:
                # §7.5 promises the result within a tolerance, not bit for bit: PEFT's merge (summed in its
                # own order) and mdiff's checkout must both be within it of the exact value.
                update = diff[name]
                if not (low_rank_type.within_tolerance(got[name], parent[name], update)
                        and low_rank_type.within_tolerance(want[name], parent[name], update)):
                    raise DemoCheckFailed(f"{label}: {name} is outside SPEC §7.5's low_rank tolerance")
                tolerance.append(name)
            elif _bits_equal(got[name], want[name]):
                exact.append(name)
            else:
                raise DemoCheckFailed(f"{label}: the checkout's {name} is not the trained value, bit for bit")
    identical = _compare_folders(out, trained.folder, label) if trained.folder is not None else []

    predictions, logits_equal, largest = [], True, 0.0
    for x in (inputs.test, inputs.test_shifted):
        reference, reloaded = tr.logits(trained.model, x), tr.logits(checkout, x)
        logits_equal &= _bits_equal(reference.numpy(), reloaded.numpy())
        largest = max(largest, float((reference - reloaded).abs().max()))
        if not torch.equal(reference.argmax(-1), reloaded.argmax(-1)):
            raise DemoCheckFailed(f"{label}: the reloaded checkout predicts differently from what was trained")
        predictions.append(reloaded.argmax(-1).numpy())
    if not tolerance and not logits_equal:
        raise DemoCheckFailed(f"{label}: the reloaded checkout's logits are not those of what was trained")

    change = {}
    if parent is not None:
        for name, new in got.items():
            old = parent[name].astype(np.float64)
            change[name] = float(np.linalg.norm(new.astype(np.float64) - old) / np.linalg.norm(old))
    metadata = repo.metadata(commit_id)
    return CommitRow(
        label=label, commit_id=commit_id, branch=trained.branch, message=metadata.message, meta=dict(metadata.meta),
        accuracy=float(np.mean(predictions[0] == inputs.labels)),
        shifted_accuracy=float(np.mean(predictions[1] == inputs.labels)),
        diff_bytes=repo.commit_path(commit_id).stat().st_size,
        full_bytes=sum(p.stat().st_size for p in out.glob("*.safetensors")),
        update_types=update_types, files=files, commit_seconds=trained.commit_seconds,
        checkout_seconds=checkout_seconds,
        proof=Proof(source=trained.source, identical_files=identical, exact=exact, within_tolerance=tolerance,
                    logits_equal=logits_equal, max_logit_difference=largest),
        relative_change=change,
    )


def _compare_folders(checkout: Path, committed: Path, label: str) -> list[str]:
    """The files of ``checkout``, each checked byte-identical to the committed folder's; the committed
    folder may have more only where they are training state (optimizer, RNG, training_args.bin)."""
    got, want = _folder_files(checkout), _folder_files(committed)
    left_out = [path for path in want if path not in got]
    not_training_state = [p for p in left_out if not any(fnmatch.fnmatch(p, pattern) for pattern in TRAINING_STATE)]
    if not_training_state or set(got) - set(want):
        raise DemoCheckFailed(f"{label}: the checkout has files {sorted(got)}, the committed folder {sorted(want)}")
    for path, file in got.items():
        if file.read_bytes() != want[path].read_bytes():
            raise DemoCheckFailed(f"{label}: the checkout's {path} is not the committed file, byte for byte")
    return list(got)

