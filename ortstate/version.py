"""The package version, importable without the package (``ortstate.__version__`` re-exports it)."""

__version__ = "0.1.0"
