"""The package's version, in a module of its own so that what writes it (``tfspec emit``) needs no other."""

__version__ = "0.1.0"
