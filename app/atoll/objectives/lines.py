"""Reading the ``ATOLL ...`` lines a command prints (the format: :mod:`atoll.report_line`)."""

from __future__ import annotations

from dataclasses import dataclass, field

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
