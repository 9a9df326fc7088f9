"""Each search's result kept on disk, so that a run of hours stopped part-way goes on where it
stopped (``make bench-full``).

A result is reused only while everything that decides it is unchanged: the task as launched
(minus its directory), the side's scripts, the shared objectives and, for Atoll, every file of
the package; for a peer, the packages of its virtual env. Anything else changed, and the search
runs again. Each entry says when it was measured, so the table can say which results are older
than the run that wrote it.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from common import HERE, ROOT, SIDES

SHARED = ("side.py", "objectives.py")


def _digest(root: Path, paths: list[Path], extra: tuple[str, ...] = ()) -> str:
    h = hashlib.sha256()
    for path in sorted(paths):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    for text in extra:
        h.update(text.encode())
    return h.hexdigest()


def code_fingerprint(side: str, root: Path = ROOT) -> str:
    """What a side's results depend on besides the task: its scripts and its packages (the
    tree at ``root``: a test passes a copy)."""
    python, script = SIDES[side]
    here = root / HERE.relative_to(ROOT)
    files = [here / script.name, *(here / name for name in SHARED)]
    if side in ("atoll", "control"):
        files += list((root / "app" / "atoll").rglob("*.py"))
        return _digest(root, files)
    site = sorted(str(p.name) for p in python.parent.parent.glob("lib/python*/site-packages/*"))
    return _digest(root, files, tuple(site))


class SearchCache:
    """One JSON file per search under ``directory``, named by the hash of what decides it."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.fingerprints: dict[str, str] = {}
        self.reused: list[str] = []
        self.measured = 0

    def _path(self, side: str, task: dict[str, Any]) -> Path:
        """The entry's file, named by the hash of the side, its code and the task."""
        if side not in self.fingerprints:
            self.fingerprints[side] = code_fingerprint(side)
        what = {k: v for k, v in task.items() if k != "run_dir"}
        text = json.dumps([side, self.fingerprints[side], what], sort_keys=True)
        return self.directory / f"{hashlib.sha256(text.encode()).hexdigest()[:32]}.json"

    def get(self, side: str, task: dict[str, Any]) -> dict[str, Any] | None:
        path = self._path(side, task)
        try:
            entry = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        self.reused.append(entry["measured"])
        return entry["result"]

    def put(self, side: str, task: dict[str, Any], result: dict[str, Any]) -> None:
        """Write the entry whole or not at all (a kill mid-write leaves no half file)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self._path(side, task)
        entry = {"measured": datetime.datetime.now().isoformat(timespec="minutes"),
                 "result": result}
        partial = path.with_suffix(".part")
        partial.write_text(json.dumps(entry))
        os.replace(partial, path)
        self.measured += 1

    def summary(self) -> str:
        """One line for the table's notes: how many results this run measured, how many it
        took from earlier runs, and when those were measured."""
        if not self.reused:
            return f"every search measured in this run ({self.measured})"
        return (f"{self.measured} searches measured in this run, {len(self.reused)} taken "
                f"from earlier runs of the same code ({min(self.reused)} to "
                f"{max(self.reused)}; {self.directory.name}/)")
