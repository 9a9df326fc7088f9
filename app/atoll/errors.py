"""Errors that reach the user as one clear line (the CLI prints them and exits 2)."""


class AtollError(Exception):
    """Bad input the user can fix: its message says what is wrong and how to fix it."""


class ConfigError(AtollError):
    """A config file, an override or a search space is invalid."""


class LayoutError(AtollError):
    """The rank layout (world size, ranks per worker, islands) does not fit."""


class ObjectiveError(AtollError):
    """The objective cannot be found, imported or called."""


class RecordError(AtollError):
    """A run directory or one of its files cannot be used: foreign, damaged, newer, other space."""
