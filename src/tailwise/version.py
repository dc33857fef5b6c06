"""The package version, in a module of its own so any layer can read it without
importing ``tailwise`` itself (whose ``run()`` facade sits above the load generator)."""

__version__ = "0.1.0"
