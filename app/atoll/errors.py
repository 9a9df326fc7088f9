"""Errors that reach the user as one clear line (the CLI prints them and exits 2)."""

import shlex
from collections.abc import Sequence


def described(exc: BaseException) -> str:
    """``Type: first line`` of an error, or just ``Type`` when it says nothing: how a failed
    individual, a failed import and another rank's crash are told in one line."""
    first = (str(exc).splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def suggested(*words: object) -> str:
    """A command a message suggests, quoted so that it can be pasted into a shell (run
    directories with spaces): ``'atoll resume runs/a'``, ``"atoll resume 'runs/my run'"``."""
    text = shlex.join(str(word) for word in words)
    return f'"{text}"' if "'" in text else f"'{text}'"


def ranks_text(ranks: Sequence[int]) -> str:
    """``0-3, 8, 10-11``: consecutive ranks as ranges; long lists shortened in the middle."""
    parts: list[str] = []
    for rank in sorted(ranks):
        if parts and parts[-1].split("-")[-1] == str(rank - 1):
            parts[-1] = f"{parts[-1].split('-')[0]}-{rank}"
        else:
            parts.append(str(rank))
    return ", ".join(parts if len(parts) <= 8 else [*parts[:3], "...", *parts[-2:]])


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
