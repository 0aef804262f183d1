"""What the demo needs installed (the versions the ``demo`` extra pins), and which of it is missing."""

from __future__ import annotations

import importlib.util

# import name → what to install (the versions the `demo` extra pins)
REQUIREMENTS = {"torch": "torch==2.13.0", "transformers": "transformers==5.18.0", "peft": "peft==0.21.0",
                "accelerate": "accelerate==1.16.0", "sklearn": "scikit-learn==1.9.1",
                "matplotlib": "matplotlib==3.11.2"}


def missing_packages() -> list[str]:
    """The requirements (pip specifiers) of the demo that are not importable here."""
    def present(module: str) -> bool:
        try:
            return importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a broken install, or a module set to None in sys.modules
            return False

    return [spec for module, spec in REQUIREMENTS.items() if not present(module)]
