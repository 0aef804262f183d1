"""The conformance corpus (``conformance/`` at the repository root) and its runner.

The corpus is language-neutral: files, a manifest (``conformance/manifest.json``) saying what
an implementation must do with each, and a command-line contract
(``conformance/README.md``). This package loads the manifest, runs an implementation on a
case through that contract and compares what it did with what the manifest expects::

    from mdiff.conformance import load_manifest, CommandImplementation, run_cases
    manifest = load_manifest()
    results = run_cases(CommandImplementation("node tools/mdiff-js/bin/mdiff-js.js"), manifest)

``python -m mdiff.conformance`` is the command-line runner (by default on the reference, ``python
-m mdiff.cli.main``). This package prints nothing; only ``__main__`` does.
"""

from mdiff.conformance.compare import compare_states, within_bounds
from mdiff.conformance.implementations import (
    CommandImplementation,
    Completed,
    Implementation,
    InProcessImplementation,
    reference_command,
    reference_in_process,
)
from mdiff.conformance.manifest import Case, Manifest, ManifestError, default_corpus, load_manifest
from mdiff.conformance.runner import CaseResult, run_case, run_cases, summary_line, unclaimed_features

__all__ = [
    "Case", "CaseResult", "CommandImplementation", "Completed", "Implementation", "InProcessImplementation",
    "Manifest", "ManifestError", "compare_states", "default_corpus", "load_manifest", "reference_command",
    "reference_in_process", "run_case", "run_cases", "summary_line", "unclaimed_features", "within_bounds",
]
