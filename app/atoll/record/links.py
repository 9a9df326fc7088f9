"""Hard-linked copies of a command's checkpoint directory: a child's view of its parent's files,
and the kept files of a run's best individuals. A link costs no room and cannot be changed by
the script's next save, which writes a new file and renames it over the old name."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from atoll.errors import described


def holds_files(directory: Path) -> bool:
    """Whether ``directory`` exists and holds anything."""
    try:
        return any(directory.iterdir())
    except OSError:
        return False


def link_tree(source: Path, target: Path) -> str:
    """Make ``target`` anew with hard links to the files under ``source`` (copies where a link
    cannot be made); "" when done, else why not."""
    shutil.rmtree(target, ignore_errors=True)
    if not holds_files(source):
        return f"its script's checkpoint directory {source} is empty or gone"
    try:
        shutil.copytree(source, target, copy_function=_link_or_copy)
    except OSError as exc:
        shutil.rmtree(target, ignore_errors=True)
        return f"its script's checkpoint directory could not be linked: {described(exc)}"
    return ""


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system, or one without hard links
        shutil.copy2(source, target)
