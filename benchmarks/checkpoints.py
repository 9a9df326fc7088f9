"""Checkpoint cost (Atoll only): MB/s of saving and loading a model with its Adam state.

Runs in a process of its own (``python checkpoints.py OUT.json``, started by :func:`run`), in
Atoll's venv. For each size, a float32 model of linear layers sized so that its weights plus
Adam's two moments make the state (model state dict + optimizer state dict) about that many MB,
after one optimizer step; then ``CheckpointStore.save`` (built in memory, checksummed, written
to a temporary file, fsync'd, renamed) and ``CheckpointStore.load`` (checksum verified, tensors
on the CPU), each timed REPEATS times in a temporary directory of this machine's disk.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import ATOLL_PYTHON, Row, mpi_env

SIZES_MB = (10, 500)
REPEATS = 3
WIDTH = 1024


def _state(size_mb: int) -> tuple[dict[str, Any], int]:
    """(model + Adam state, its bytes): weights are a third of it, Adam's moments the rest."""
    import torch

    rows = max(1, int(size_mb * 1024 * 1024 / 3 / 4 / WIDTH))
    model = torch.nn.Linear(WIDTH, rows)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(2, WIDTH)).sum().backward()
    optimizer.step()
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": 1}
    size = sum(p.numel() * p.element_size() for p in model.parameters()) * 3
    return state, size


def measure() -> dict[str, Any]:
    from atoll.record import RunPaths
    from atoll.record.checkpoints import CheckpointStore

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-checkpoints-", dir=Path.cwd()) as tmp:
        store = CheckpointStore(RunPaths(tmp), "bench")
        for size_mb in SIZES_MB:
            state, size = _state(size_mb)
            saves, loads = [], []
            for _ in range(REPEATS):
                start = time.perf_counter()
                store.save(1, 1, state)
                saves.append(time.perf_counter() - start)
                start = time.perf_counter()
                loaded = store.load(1)
                loads.append(time.perf_counter() - start)
                if loaded is None:
                    raise RuntimeError("the checkpoint just saved did not load")
            out[str(size_mb)] = {"bytes": size, "save_s": saves, "load_s": loads,
                                 "file_bytes": store.paths.checkpoint_file(1).stat().st_size}
            del state, loaded
    return out


def run(log: Any = print) -> tuple[list[Row], list[str]]:
    with tempfile.TemporaryDirectory() as tmp:
        out_file = Path(tmp) / "checkpoints.json"
        subprocess.run([str(ATOLL_PYTHON), __file__, str(out_file)], check=True,
                       env=mpi_env())
        got = json.loads(out_file.read_text())
    rows, notes = [], []
    for size_mb in SIZES_MB:
        one = got[str(size_mb)]
        mb = one["bytes"] / 2**20
        save, load = min(one["save_s"]), min(one["load_s"])
        log(f"  checkpoints {size_mb} MB: save {[round(t, 3) for t in one['save_s']]} s, "
            f"load {[round(t, 3) for t in one['load_s']]} s")
        rows += [Row(f"checkpoint save, model + Adam state of {mb:.0f} MB (written whole, "
                     f"fsync'd; best of {REPEATS})", f"{mb / save:.0f} MB/s ({save:.2f} s)"),
                 Row(f"checkpoint load, the same {mb:.0f} MB (checksum verified; best of "
                     f"{REPEATS})", f"{mb / load:.0f} MB/s ({load:.2f} s)")]
        notes.append(f"checkpoint of {mb:.0f} MB of tensors: file {one['file_bytes'] / 2**20:.1f}"
                     " MB")
    return rows, notes


if __name__ == "__main__":
    Path(sys.argv[1]).write_text(json.dumps(measure()))
