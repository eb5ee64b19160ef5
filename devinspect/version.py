"""devinspect's version (read by the build, and sent with every rank's summary)."""

__version__ = "0.1.0"
