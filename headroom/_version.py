"""The package's version, in a module of its own so that the layers below the facade can name it
without importing `headroom` (whose first use of an API name loads headroom.api)."""

__version__ = "0.1.0"
