"""pmverify's version, in a module of its own so that the package's modules read it without
importing the package root."""

__version__ = "0.1.0"
