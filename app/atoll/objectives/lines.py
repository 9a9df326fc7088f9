"""Reading the ``ATOLL ...`` lines a command prints or writes to its results file (the format:
:mod:`atoll.report_line`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from atoll.report_line import PREFIX


class BadLine(ValueError):
    """An ``ATOLL`` line that is neither an epoch's metrics nor a result."""


@dataclass
class Lines:
    """What the leader's command said so far: new epochs (taken by :meth:`take_epochs`) and
    its result."""

    epochs: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    result: float | None = None

    def add(self, line: str) -> None:
        """Read one line of stdout; other lines than ``ATOLL ...`` are the script's own."""
        if not line.startswith(PREFIX):
            return
        pairs = _pairs(line)
        if "result" in pairs:
            if len(pairs) > 1:
                raise BadLine(f"{line.strip()!r}: a result line holds only result=<number>")
            self.result = pairs["result"]
        elif "epoch" in pairs:
            epoch = pairs.pop("epoch")
            if epoch != int(epoch) or epoch < 0 or not pairs:
                raise BadLine(f"{line.strip()!r}: expected 'ATOLL epoch=<integer >= 0> "
                              "name=<number> ...' with at least one metric")
            self.epochs.append((int(epoch), pairs))
        else:
            raise BadLine(f"{line.strip()!r}: expected 'ATOLL epoch=<n> name=<number> ...' or "
                          "'ATOLL result=<number>'")

    def take_epochs(self) -> list[tuple[int, dict[str, float]]]:
        taken, self.epochs = self.epochs, []
        return taken


def _pairs(line: str) -> dict[str, float]:
    pairs: dict[str, float] = {}
    for word in line[len(PREFIX):].split():
        name, sep, text = word.partition("=")
        try:
            pairs[name] = float(text)
        except ValueError:
            sep = ""
        if not sep or not name.isidentifier():
            raise BadLine(f"{line.strip()!r}: {word!r} is not name=<number>")
    return pairs


class ResultsFile:
    """The ``ATOLL`` lines a script appends to its results file (``objective.results = "file"``),
    read as they arrive: complete lines only, from where the file ended when the evaluation
    began (a continued evaluation's earlier lines were read by its earlier job)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = _size(path)

    def new_lines(self) -> list[str]:
        """The complete lines written since the last call (a partial last line waits)."""
        size = _size(self.path)
        if size < self._offset:  # rewritten from the start: read it again
            self._offset = 0
        if size == self._offset:
            return []
        with open(self.path, "rb") as handle:
            handle.seek(self._offset)
            data = handle.read(size - self._offset)
        complete = data[:data.rfind(b"\n") + 1]
        self._offset += len(complete)
        return complete.decode("utf-8", errors="replace").splitlines()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
