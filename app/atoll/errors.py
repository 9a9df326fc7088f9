"""Errors that reach the user as one clear line (the CLI prints them and exits 2)."""


def described(exc: BaseException) -> str:
    """``Type: first line`` of an error, or just ``Type`` when it says nothing: how a failed
    individual, a failed import and another rank's crash are told in one line."""
    first = (str(exc).splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


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
