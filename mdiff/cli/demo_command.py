"""`mdiff demo [DIR]`: the guided tour — train, fine-tune three ways, merge, prove every step.

The work is done by :mod:`mdiff.demo` (a library: it returns data and raises on a failed check);
this module only prints it, then runs `mdiff log`, `mdiff dump` and `mdiff validate` on the result.
"""

from __future__ import annotations

import sys
import time



def add_demo(sub) -> None:
    p = sub.add_parser(
        "demo", help="train a digits classifier, fine-tune it three ways, commit it all (needs the demo extra)",
        description="Train a small MLP on scikit-learn's bundled 8x8 digits and commit it as the root of a new "
                    "repository in DIR; fine-tune it on rotated digits three ways, each on its own branch (full "
                    "fine-tuning, FISH-mask sparse fine-tuning, LoRA); merge two of them into main. Then show, for "
                    "every commit, the accuracy, the diff's size next to a full checkpoint's, the update types and "
                    "the proof that checkout reproduces the trained weights; run ONNX exports with diffs applied on "
                    "onnxruntime; print `mdiff log`, `mdiff dump` and `mdiff validate`; plot the relative change "
                    "per parameter. Seeded and deterministic (the same commit ids every run); CPU only, no "
                    "download. Needs torch, scikit-learn and matplotlib: pip install -e '.[demo]'.")
    p.add_argument("directory", nargs="?", default="mdiff-demo", metavar="DIR",
                   help="a new folder for the repository (default: ./mdiff-demo); an existing repository is refused")
    p.add_argument("--quick", action="store_true", help="fewer samples and epochs (what the tests run; seconds)")
    p.add_argument("--seed", type=int, default=0, help="the seed of everything random (default 0)")
    p.set_defaults(run=run_demo)


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _checkout_text(row) -> str:
    parts = []
    if row.exact:
        parts.append(f"sha256 {len(row.exact)}/{len(row.exact)} equal")
    if row.within_tolerance:
        n = len(row.within_tolerance)
        parts.append(f"low_rank {n}/{n} within §7.5 tolerance"
                     + (" (bit-equal here)" if len(row.low_rank_bit_equal) == n
                        else f" (max |Δ| {row.max_abs_difference:.1e})"))
    parts.append("same accuracy" + (", same predictions" if row.same_predictions else ""))
    return "; ".join(parts)


def _table(rows) -> list[str]:
    header = ("commit", "branch", "what", "digits", "rotated", "diff .mdiff", "full .safetensors", "diff/full",
              "updates", "checkout")
    body = []
    for r in rows:
        what = {"root": "root", "full-ft": "full FT", "fish": "FISH mask", "lora": "LoRA", "merge": "merge"}[r.label]
        updates = ", ".join(f"{n} {t}" for t, n in r.update_types.items())
        body.append((r.commit_id[:12], r.branch, what, _pct(r.accuracy), _pct(r.rotated_accuracy),
                     f"{r.diff_bytes:,} B", f"{r.full_bytes:,} B", f"{r.diff_bytes / r.full_bytes:.0%}", updates,
                     _checkout_text(r)))
    right = {3, 4, 5, 6, 7}
    widths = [max(len(row[i]) for row in (header, *body)) for i in range(len(header))]
    lines = []
    for row in (header, *body):
        cells = [row[i].rjust(widths[i]) if i in right else row[i].ljust(widths[i]) for i in range(len(row))]
        lines.append("  ".join(cells).rstrip())
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def _run_cli(*argv: str) -> int:
    from mdiff.cli.main import main

    print(f"\n$ mdiff {' '.join(argv)}", flush=True)
    code = main(list(argv))
    sys.stdout.flush()
    return code


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
    print(f"mdiff demo: digits → rotated digits, three kinds of fine-tuning, one repository in {args.directory}"
          + (" (--quick)" if args.quick else ""), flush=True)
    try:
        result = run(args.directory, config, report=lambda message: print(f"  · {message}", flush=True))
    except DemoCheckFailed as exc:
        print(f"mdiff demo: a check failed: {exc}", file=sys.stderr)
        return 1
    d = result.directory
    fish = result.row("fish")
    kept = sum(int(m.sum()) for m in result.fish_masks.values())
    total = sum(m.size for m in result.fish_masks.values())
    print()
    print("\n".join(_table(result.rows)))
    print(f"""
digits / rotated: accuracy of the trained PyTorch model on {result.test_rows} held-out digits, and on the same digits
  rotated {result.rotation_degrees}°; the model rebuilt from `checkout` has exactly the same accuracy (checked).
diff .mdiff: the commit file in {d / '.mdiff' / 'commits'}; full .safetensors: the same state as a checkpoint.
checkout: `repo.checkout(commit)` against the weights that were trained — sha256 of every parameter equal;
  for low_rank updates SPEC §7.5 promises the result within a tolerance, not bit for bit: the LoRA model is
  evaluated with merged weights W + {result.lora_scale:g}·(B @ A) in float32, and both those and the checkout are
  within §7.5's tolerance of the exact value.
fish: {kept} of {total} entries ({config.fish_fraction:.0%}) kept by empirical Fisher information; the commit stores
  {', '.join(f'{n} {t}' for t, n in fish.update_types.items())} updates whose indices equal the mask exactly (checked).
merge: main had only the root, so it was fast-forwarded to full-ft; then `merge lora --strategy {result.merge_strategy}`
  made the merge commit, parents (full-ft, lora): {result.merge_formula} per parameter, in float64 and
  rounded once; its checkout equals that computed independently (from full-ft's weights and lora's checkout),
  sha256 for sha256.""")
    print("\nONNX on onnxruntime (CPU) next to PyTorch, same commit:")
    for o in result.onnx:
        print(f"  {o.file}: {o.how}\n    digits {_pct(o.accuracy)} (PyTorch {_pct(o.torch_accuracy)}), rotated "
              f"{_pct(o.rotated_accuracy)} (PyTorch {_pct(o.torch_rotated_accuracy)}); "
              f"{'identical predictions' if o.same_predictions else 'PREDICTIONS DIFFER'}, "
              f"max |logit difference| {o.max_logit_difference:.1e}")
    if result.onnx_initializers_equal:
        print("  the initializers of main-from-diffs.onnx equal main.onnx's, bit for bit")
    codes = [
        _run_cli("log", "--all", "-C", str(d)),
        _run_cli("dump", str(result.commit_files[result.rows.index(fish)])),
        _run_cli("validate", *map(str, result.commit_files)),
    ]
    print(f"\nplot of the relative change per parameter: {result.plot_path}")
    print(f"repository: {d} (branches {', '.join(result.branches)}; HEAD on {result.head_branch}); "
          f"ONNX models in {d / 'onnx'}")
    print(f"done in {time.perf_counter() - started:.1f} s")
    return 1 if any(codes) else 0


REGISTER = [add_demo]
