"""SendDock: self-hosted email broadcasts that survive the process dying at any moment."""

__version__ = "0.1.0"
