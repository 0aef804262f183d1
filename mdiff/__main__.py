"""`python -m mdiff`: the command line, for environments where the `mdiff` script is not on PATH."""

from mdiff.cli.main import main

raise SystemExit(main())
