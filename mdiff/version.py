"""The package version, in a module of its own so that anything can import it without importing mdiff."""

__version__ = "0.1.0"
