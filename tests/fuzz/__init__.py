"""Fuzzing mdiff with hostile files: harness.py (workers, supervisor), mutate.py and hdf5bytes.py
(mutations), corpus.py (seeds, bases), known.py (bugs found), test_fuzz.py (CI run, regressions);
tools/fuzz.py is the long run."""
