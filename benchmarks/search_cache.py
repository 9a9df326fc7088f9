"""Each search's result kept on disk, so that a run of hours stopped part-way goes on where it
stopped, on this machine or, for the peers, on a fresh clone (``make bench-full``).

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

from common import HERE, RAY_PYTHON, ROOT, SIDES

SHARED = ("side.py", "objectives.py")
RAY_TRAINING = "ray-training"
"""Ray Tune's training searches (training_ray.py): no mpirun side, so their files are named
here: Ray's scripts and the modules that decide what its trials train."""
NOT_LAUNCHED: dict[str, tuple[Path, tuple[str, ...]]] = {
    RAY_TRAINING: (RAY_PYTHON, ("benchmarks/ray_training_side.py",
                                "benchmarks/ray_training_member.py", "benchmarks/ray_budget.py",
                                "benchmarks/spirals.py", "app/atoll/objectives/classifier.py",
                                "app/atoll/objectives/data.py")),
}


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
    if side in NOT_LAUNCHED:
        python, names = NOT_LAUNCHED[side]
        files = [root / name for name in names]
    else:
        python, script = SIDES[side]
        here = root / HERE.relative_to(ROOT)
        files = [here / script.name, *(here / name for name in SHARED)]
    if side in ("atoll", "control"):
        files += list((root / "app" / "atoll").rglob("*.py"))
        return _digest(root, files)
    site = sorted(str(p.name) for p in python.parent.parent.glob("lib/python*/site-packages/*"))
    return _digest(root, files, tuple(site))


class SearchCache:
    """One JSON line per search, in one file per side under ``directory`` (``SIDE.jsonl``),
    keyed by the hash of the side, its code and the task.

    ``make bench-full`` keeps its directory in the repository for the peers' sides: their
    results change only with their pinned packages, and they are the hours of a run. Atoll's
    change with every edit of the package and are not kept there (.gitignore).
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.fingerprints: dict[str, str] = {}
        self._entries: dict[str, dict[str, dict[str, Any]]] = {}  # side: key: entry
        self.reused: list[str] = []
        self.measured = 0

    def _key(self, side: str, task: dict[str, Any]) -> str:
        if side not in self.fingerprints:
            self.fingerprints[side] = code_fingerprint(side)
        text = json.dumps([side, self.fingerprints[side], _what(task)], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def _file(self, side: str) -> Path:
        return self.directory / f"{side}.jsonl"

    def _side(self, side: str) -> dict[str, dict[str, Any]]:
        """The side's entries, read once; a line that does not parse (a write cut short) is
        no entry."""
        if side not in self._entries:
            entries: dict[str, dict[str, Any]] = {}
            try:
                lines = self._file(side).read_text().splitlines()
            except OSError:
                lines = []
            for line in lines:
                try:
                    entry = json.loads(line)
                    entries[entry["key"]] = entry
                except (ValueError, KeyError, TypeError):
                    continue
            self._entries[side] = entries
        return self._entries[side]

    def get(self, side: str, task: dict[str, Any]) -> dict[str, Any] | None:
        entry = self._side(side).get(self._key(side, task))
        if entry is None:
            return None
        self.reused.append(entry["measured"])
        return dict(entry["result"])

    def put(self, side: str, task: dict[str, Any], result: dict[str, Any]) -> None:
        """Append the entry as one line, on a line of its own even after a write that was cut
        short, and flushed to disk before the run goes on."""
        self.directory.mkdir(parents=True, exist_ok=True)
        key = self._key(side, task)
        entry = {"key": key, "side": side, "task": _what(task),
                 "measured": datetime.datetime.now().isoformat(timespec="minutes"),
                 "result": result}
        path = self._file(side)
        with open(path, "ab+") as f:  # appends go to the end wherever it last read
            size = f.seek(0, os.SEEK_END)
            torn = False
            if size:
                f.seek(size - 1)
                torn = f.read(1) != b"\n"
            f.write((b"\n" if torn else b"") + json.dumps(entry).encode() + b"\n")
            f.flush()
            os.fsync(f.fileno())
        self._side(side)[key] = entry
        self.measured += 1

    def summary(self) -> str:
        """One line for the table's notes: how many results this run measured, how many it
        took from earlier runs, and when those were measured."""
        if not self.reused:
            return f"every search measured in this run ({self.measured})"
        return (f"{self.measured} searches measured in this run, {len(self.reused)} taken "
                f"from earlier runs of the same code ({min(self.reused)} to "
                f"{max(self.reused)}; {self.directory.name}/)")


def _what(task: dict[str, Any]) -> dict[str, Any]:
    """What decides a search's result: the task as launched, minus its directory."""
    return {k: v for k, v in task.items() if k != "run_dir"}
