"""`mdiff demo [DIR]`: the guided tour — a small transformers model trained, fine-tuned three ways,
merged, every step committed and proved.

The work is done by :mod:`mdiff.demo` (a library: it returns data and raises on a failed check);
this module only prints it, then runs `mdiff log` and `mdiff dump` on the result.
"""

from __future__ import annotations

import sys
import textwrap
import time

from mdiff.cli import file_commands, repo_commands
from mdiff.cli.dispatch import run
from mdiff.cli.registry import Commands

COMMANDS = Commands()


def demo_arguments(p) -> None:
    p.add_argument("directory", nargs="?", default="mdiff-demo", metavar="DIR",
                   help="a new folder for the repository (default: ./mdiff-demo); an existing repository is refused")
    p.add_argument("--quick", action="store_true", help="far fewer training steps (what the tests run; seconds)")
    p.add_argument("--seed", type=int, default=0, help="the seed of everything random (default 0)")


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _what(row) -> str:
    """The commit in a few words: how it was made."""
    if row.label == "base":
        return "base (save_pretrained)"
    if row.label.startswith("step "):
        loss = row.meta.get("loss")
        return f"Trainer {row.label}" + (f", loss {float(loss):.3f}" if loss else "")
    if row.label == "merge":
        return f"merge {row.meta.get('merge_strategy', '')}".rstrip()
    return {"fish": "FISH mask (state dict)", "lora": "LoRA (import-peft)"}[row.label]


def _proof(row) -> str:
    """What the checkout was shown equal to (the notes under the table say how)."""
    p = row.proof
    if p.identical_files:
        held = f"{len(p.identical_files)} files identical"
    elif p.within_tolerance:
        held = f"{len(p.within_tolerance)} low_rank within §7.5"
    else:
        held = f"{len(p.exact)} tensors identical"
    return held + (", logits equal" if p.logits_equal else ", same predictions")


def _change(row) -> str:
    from statistics import median  # here: it costs every command's start-up a few milliseconds

    changed = [v for v in row.relative_change.values() if v > 0]
    return f"{median(changed):.1e}" if changed else "-"


def _table(result) -> list[str]:
    header = ("commit", "branch", "what", "digits", "shifted", "rel. change", ".mdiff MB", "git-lfs MB", "ratio",
              "updates", "commit", "checkout", "checkout = trained")
    body = []
    for r in result.rows:
        updates = ", ".join(f"{n} {t}" for t, n in r.update_types.items())
        body.append((r.commit_id[:12], r.branch, _what(r), _pct(r.accuracy), _pct(r.shifted_accuracy), _change(r),
                     f"{r.diff_bytes / 1e6:.3f}", f"{r.full_bytes / 1e6:.3f}", f"{r.diff_bytes / r.full_bytes:.0%}",
                     updates, f"{r.commit_seconds:.2f} s", f"{r.checkout_seconds:.2f} s", _proof(r)))
    full = sum(r.full_bytes for r in result.rows)
    total = (f"{len(result.rows)} commits", "", "", "", "", "", f"{result.repository_bytes / 1e6:.3f}",
             f"{full / 1e6:.3f}", f"{result.repository_bytes / full:.0%}", "the whole .mdiff/ folder", "", "", "")
    right = {3, 4, 5, 6, 7, 8, 10, 11}
    widths = [max(len(row[i]) for row in (header, *body, total)) for i in range(len(header))]

    def line(row) -> str:
        cells = [row[i].rjust(widths[i]) if i in right else row[i].ljust(widths[i]) for i in range(len(row))]
        return "  ".join(cells).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return [line(header), rule, *map(line, body), rule, line(total)]


def _notes(result) -> list[str]:
    """The table's columns and each branch's story, a paragraph each."""
    c, d = result.config, result.directory
    kept = sum(int(m.sum()) for m in result.fish_masks.values())
    entries = sum(m.size for m in result.fish_masks.values())
    fish, lora = result.row("fish"), result.row("lora")
    saves = sum(r.label.startswith("step ") for r in result.rows)
    low_rank = ("bit-equal here" if lora.proof.logits_equal
                else f"max |Δlogit| {lora.proof.max_logit_difference:.1e}")
    paragraphs = [
        (f"digits / shifted: accuracy of the checkout, reloaded with from_pretrained, on {result.test_rows} held-out "
         "digits and on the same digits one pixel lower (the fine-tuning domain)."),
        ("rel. change: the median, over the parameters a commit changes, of ‖new − old‖/‖old‖ against its first "
         f"parent; every parameter's is plotted, on a log scale, in {result.plot_path}."),
        (f".mdiff MB: the commit file ({d / '.mdiff' / 'commits'}); git-lfs MB: the commit's weight files "
         "(*.safetensors), which git-lfs would store whole for every commit. mdiff stores what changed: dense XOR "
         "or sparse, exact; LoRA as low_rank factors; the config, tokenizer and trainer_state.json only when they "
         "change."),
        ("commit: the time to commit (for the Trainer's saves, MdiffCallback.on_save); checkout: repo.checkout to a "
         "folder, every exact update verified by its sha256."),
        ("checkout = trained: the checked-out folder's files are byte-identical to the folder committed (base/, or the "
         "Trainer's checkpoint-<step>/ less its training_args.bin); every tensor is bit-identical to what was trained "
         f"(the FISH model's state dict; the merge computed here); from_pretrained of it gives the same logits, bit "
         f"for bit, on all {2 * result.test_rows} inputs. LoRA: SPEC §7.5 promises low_rank within a tolerance, not "
         "bit for bit; the checkout and PEFT's merge_and_unload() are both within it of the exact value "
         f"({low_rank}), and predict the same."),
        (f"finetune: the Trainer saved every {c.save_steps} steps at lr {c.finetune_lr:g}; MdiffCallback committed "
         f"each of the {saves} checkpoints, with the step, epoch, loss, grad_norm and learning rate in the "
         "commit's meta."),
        (f"fish: {kept:,} of {entries:,} entries ({c.fish_fraction:.0%}) chosen by empirical Fisher information and "
         f"trained at lr {c.fish_lr:g}; the commit stores "
         f"{', '.join(f'{n} {t}' for t, n in fish.update_types.items())} updates whose indices are exactly the mask."),
        (f"lora: r={c.lora_rank}, scale {result.lora_scale:g}, lr {c.lora_lr:g}; the adapter's factors are "
         f"{lora.update_types.get('low_rank', 0)} low_rank updates, the classifier PEFT trains in full "
         f"{lora.update_types.get('replace', 0)} replace updates."),
        (f"merge: main had only the root, so it was fast-forwarded to finetune; `merge lora --strategy "
         f"{c.merge_strategy}` made the merge commit, parents (finetune, lora): {result.merge_formula} per parameter, "
         "in float64, rounded once; its checkout is that, computed here from the two commits, bit for bit."),
    ]
    return [textwrap.fill(p, width=116, subsequent_indent="  ") for p in paragraphs]


def _run_cli(*argv: str) -> int:
    """Run a file or repository command as `mdiff` does (the demo shows `mdiff log` and `mdiff dump`)."""
    print(f"\n$ mdiff {' '.join(argv)}", flush=True)
    code = run(list(argv), [*file_commands.COMMANDS, *repo_commands.COMMANDS])
    sys.stdout.flush()
    return code


@COMMANDS.command("demo", help="train a small BERT, fine-tune it three ways, commit it all (needs the demo extra)",
                  arguments=demo_arguments,
                  description="Build a small BERT-style classifier from a config (transformers), train it with the Trainer on "
                              "scikit-learn's bundled 8x8 digits written as text, save it sharded with save_pretrained and "
                              "commit the folder as the root of a new repository in DIR. Fine-tune it on the digits one pixel "
                              "lower three ways, each on its own branch: full fine-tuning at a realistic learning rate, every "
                              "Trainer save committed by MdiffCallback; FISH-mask sparse fine-tuning, the state dict committed "
                              "with its mask; LoRA with PEFT, imported with import-peft. Merge LoRA into the fine-tune. Then "
                              "check out every commit, reload it with from_pretrained and prove it is what was trained; show "
                              "per commit the accuracy, the .mdiff size next to the full checkpoint git-lfs would store, the "
                              "update types and the times; validate every commit file; print `mdiff log` and `mdiff dump`; "
                              "plot the relative change per parameter on a log scale. Seeded and deterministic (the same "
                              "commit ids every run); CPU only, nothing downloaded. Needs torch, transformers, peft, "
                              "accelerate, scikit-learn and matplotlib: pip install -e '.[demo]'.")
def run_demo(args) -> int:
    from mdiff.demo import DemoCheckFailed, DemoConfig, missing_packages

    missing = missing_packages()
    if missing:
        print(f"mdiff demo: needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} not installed.\n"
              "  Install the demo extra: pip install -e '.[demo]'   (from the mdiff checkout)\n"
              f"  or the packages themselves: pip install {' '.join(repr(m) if '=' in m else m for m in missing)}",
              file=sys.stderr)
        return 2
    from mdiff.demo import run_demo as run

    config = DemoConfig.quick(seed=args.seed) if args.quick else DemoConfig(seed=args.seed)
    started = time.perf_counter()
    print(f"mdiff demo: a small BERT trained, fine-tuned three ways and versioned in {args.directory}"
          + (" (--quick)" if args.quick else ""), flush=True)
    try:
        result = run(args.directory, config, report=lambda message: print(f"  · {message}", flush=True))
    except DemoCheckFailed as exc:
        print(f"mdiff demo: a check failed: {exc}", file=sys.stderr)
        return 1
    d = result.directory
    print()
    print("\n".join(_table(result)))
    print()
    print("\n".join(_notes(result)))
    last_step = [r for r in result.rows if r.label.startswith("step ")][-1]
    codes = [
        _run_cli("log", "--all", "-C", str(d)),
        _run_cli("dump", str(result.commit_files[result.rows.index(last_step)])),
    ]
    warning_count = sum(len(found) for found in result.findings.values())
    print(f"\nvalidated every commit file (mdiff.validate, every rule of SPEC.md): {len(result.findings)} valid, "
          f"0 errors, {warning_count} warnings")
    print(f"plot of the relative change per parameter (log scale): {result.plot_path}")
    print(f"repository: {d} (branches {', '.join(result.branches)}; HEAD on {result.head_branch}); the base in "
          f"{d / 'base'}, the Trainer's checkpoints in {d / 'runs'}, every commit checked out in {d / 'checkouts'}")
    print(f"done in {time.perf_counter() - started:.1f} s")
    print(f"\nsee it in your browser (the history graph, each commit's parameters and heat map):\n  mdiff view {d}")
    return 1 if any(codes) else 0

