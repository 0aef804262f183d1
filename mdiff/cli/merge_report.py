"""How `merge`, `pull` and `merge-file` say what a merge did (SPEC.md §13.7): a fast-forward, a three-way
merge with what it took from each side, the strategy used, or the conflicts left and the ways to resolve them."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from mdiff.words import count

if TYPE_CHECKING:
    from mdiff.repo.merge import Conflict, MergeResult

_RESOLUTIONS = (
    ("--strategy ours", "keep this branch's value of each conflicting parameter (theirs: the other's)"),
    ("--strategy average", "combine them: also weighted:ALPHA (ALPHA·ours + (1−ALPHA)·theirs), task-arithmetic[:LAMBDA]"),
    ("--strategy average --all", "average every parameter both sides hold, not only the conflicts (a model soup)"),
)



def merge_data(result: MergeResult) -> dict[str, Any]:
    """The merge as JSON: how, the commit, the outcome counts, the merge base and the conflicts."""
    return {"outcome": result.how, "commit": result.commit, "base": result.base, "counts": dict(sorted(result.tally.items())),
            "conflicts": [{"parameter": c.name, "reason": c.reason, "ours": c.ours, "theirs": c.theirs}
                          for c in result.conflicts]}


def merge_lines(result: MergeResult, rev: str, branch: str | None, strategy: str | None, everything: bool,
                command: str = "mdiff merge") -> list[str]:
    """What a person reads after a merge of ``rev`` into ``branch``."""
    into = branch or "HEAD"
    short = (result.commit or "")[:12]
    if result.how == "up to date":
        return [f"already up to date: {into} has every commit of {rev}"]
    if result.how == "fast-forward":
        return [f"fast-forward: {into} moved to {short} ({rev})"]
    tally = result.tally
    if result.how == "merge":
        if strategy is not None and everything:
            return [f"merged {rev} into {into} with {strategy} on every parameter: {short}"]
        parts = _outcomes(tally, count(tally["theirs"], "parameter") + f" from {rev}", f"{tally['ours']} from {into}",
                          strategy)
        return [f"three-way merge of {rev} into {into}: {parts}: {short}"]
    lines = [f"mdiff: error MD804: merging {rev} into {into} left {count(len(result.conflicts), 'conflict')}; "
             "nothing was committed"]
    lines += conflict_table(result.conflicts)
    lines.append("to resolve, merge again with:")
    lines += [f"  {command} {rev} {option:<26} {meaning}" for option, meaning in _RESOLUTIONS]
    return lines


def conflict_table(conflicts: list[Conflict]) -> list[str]:
    """The conflicts as a table: what, how ours and theirs changed it, why it conflicts."""
    rows = [("CONFLICT", "OURS", "THEIRS", "WHY")] + [(c.name, c.ours, c.theirs, c.reason) for c in conflicts]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return ["  " + "  ".join(row[i].ljust(widths[i]) for i in range(3)) + "  " + row[3] for row in rows]


def merge_file_data(output: str, conflicts: list[Conflict], tally: Counter[str], written: int) -> dict[str, Any]:
    """`merge-file --json`: the outcome, the outcome counts, and the conflicts left as findings (MD804, the
    conformance contract's form: conformance/README.md), one per conflicting parameter."""
    return {"outcome": "conflicts" if conflicts else "merged", "output": None if conflicts else output,
            "parameters": None if conflicts else written, "counts": dict(sorted(tally.items())),
            "findings": [{"code": "MD804", "severity": "error", "path": c.name, "section": "13.7", "message": c.reason,
                          "ours": c.ours, "theirs": c.theirs} for c in conflicts]}


def merge_file_lines(output: str, conflicts: list[Conflict], tally: Counter[str], written: int,
                     strategy: str | None, everything: bool) -> list[str]:
    """What a person reads after `mdiff merge-file`."""
    if conflicts:
        lines = [f"mdiff: error MD804: the merge left {count(len(conflicts), 'conflict')}; {output} was not written"]
        lines += conflict_table(conflicts)
        lines.append("to resolve, merge again with --strategy ours, theirs, average, weighted:ALPHA or "
                     "task-arithmetic[:LAMBDA] (add --all to apply it to every parameter)")
        return lines
    if strategy is not None and everything:
        return [f"wrote {output}: {count(written, 'parameter')}, {strategy} on every parameter"]
    parts = _outcomes(tally, f"{tally['theirs']} from theirs", f"{tally['ours']} from ours", strategy)
    return [f"wrote {output}: {count(written, 'parameter')}, three-way: {parts}"]


def _outcomes(tally: Counter[str], theirs: str, ours: str, strategy: str | None) -> str:
    """What a three-way merge took from where: each side's changes, those alike, the conflicts resolved."""
    parts = [theirs, ours]
    if tally["alike"]:
        parts.append(f"{tally['alike']} changed alike on both")
    if tally["resolved"]:
        parts.append(f"{count(tally['resolved'], 'conflict')} resolved by {strategy}")
    return ", ".join(parts)
