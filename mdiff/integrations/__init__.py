"""Integrations with training frameworks; each module imports its framework, so import the one you use:
``from mdiff.integrations.transformers import MdiffCallback``."""
