"""The wheel's build step beside pyproject.toml: `mdiff view`'s page (tools/mdiff-js/view/'s index.html, view.css
and the committed bundle dist/page.js, with h5wasm's licence) is copied into the package as mdiff/view/static/
(docs/architecture.md). A checkout runs the page from tools/mdiff-js/ itself; the build needs
`npm ci --prefix tools/mdiff-js` first (for the licence)."""

import importlib
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildPyWithPage(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install serves the page from tools/mdiff-js/ itself (mdiff/view/site.py)
        sys.path.insert(0, str(HERE))  # mdiff.view.site imports the standard library only (and mdiff's lazy __init__)
        try:
            site = importlib.import_module("mdiff.view.site")
        finally:
            sys.path.remove(str(HERE))
        site.copy_page(Path(self.build_lib) / "mdiff" / "view" / "static", HERE / "tools" / "mdiff-js")


setup(cmdclass={"build_py": BuildPyWithPage})
