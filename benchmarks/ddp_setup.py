"""DDP setup per individual: Atoll's 2-rank worker against the tutorial's recipe, on digits.

Setup = from the parameters in hand to the first training step (process group, data, loaders,
the model on its device). Both sides run under ``mpirun -n 2`` as one worker of 2 ranks and
set up the same individuals (the same parameters, in the same order), one launch each:

- **Atoll**: a real ``atoll search`` of examples/digits.toml (``search.islands=1``,
  ``search.generations=INDIVIDUALS``, ``objective.options.epochs=1``,
  ``objective.options.num_workers=0``, the default). Each individual's ``setup_seconds`` is the
  classifier's own metric (its leader's clock, from entering ``train`` to the first step), read
  back from the record. The process group is made once per worker, the data set is read once
  and kept in memory, the loader has no worker processes.
- **tutorial**: tutorial_recipe.py, run on the parameters Atoll's search evaluated: a new store
  and gloo process group, the data set re-read from disk, new loaders with 2 loader processes,
  model and DDP, for every individual (see that file).

Atoll's clock starts when its leader enters ``train`` (no barrier: a partner rank that is still
catching up counts against Atoll at the first collective, DDP's constructor); the tutorial's
clock starts right after a barrier of both ranks. Atoll's clock stops just before
``iter(loader)`` (no loader processes: the first batch is a tensor index, microseconds); the
tutorial's once the first batch is in hand (``iter`` forks its loader processes).

The first individual of each side also pays one-time costs (Atoll: the process group and lazy
imports; both: torch's lazy import of torch._dynamo in the first DDP constructor). The target
compares the medians over individuals 2..INDIVIDUALS; the first ones are reported beside them.

The load of a shared machine changes within seconds, so the two sides run ROUNDS times, in the
order A T, T A, ...; the medians pool individuals 2..INDIVIDUALS of every round. A
single-worker search is reproducible, so every Atoll round evaluates the same parameters
(checked), and the tutorial gets them too.
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import common
from common import ATOLL_PYTHON, HERE, ROOT, Row, mpi_env

INDIVIDUALS = 6
ROUNDS = 2
RANKS = 2
TARGET = 0.10
DIGITS = ROOT / "examples" / "digits.toml"
PARAMETERS = ("conv_layers", "activation", "lr", "gamma")


def mpirun(ranks: int, args: list[str], workdir: Path, name: str) -> float:
    """``mpirun -n ranks python -m mpi4py ARGS`` from Atoll's venv; seconds it took.

    ``-m mpi4py``: an uncaught error on one rank aborts the job instead of hanging it.
    """
    command = [str(ATOLL_PYTHON.parent / "mpirun"), "-n", str(ranks), "--oversubscribe",
               "--bind-to", "none", "-x", "PYTHONPATH", str(ATOLL_PYTHON), "-m", "mpi4py",
               *args]
    log_path = workdir / f"{name}.log"
    started = time.time()
    code = common.run_logged(command, log_path, name, workdir, mpi_env())
    if code != 0:
        tail = log_path.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{name} failed (exit {code}); log {log_path}:\n{tail}")
    return time.time() - started


def atoll_search(ranks: int, overrides: list[str], workdir: Path, name: str) -> Any:
    """A real ``atoll search`` of examples/digits.toml with ``overrides``; its record."""
    from atoll.record import open_run

    run_dir = workdir / name
    sets = [arg for item in overrides for arg in ("--set", item)]
    mpirun(ranks, ["-m", "atoll", "search", "--config", str(DIGITS), "--run-dir", str(run_dir),
                   *sets], workdir, name)
    return open_run(run_dir)


def value_of(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode()
    return value.item() if hasattr(value, "item") else value


def atoll_side(workdir: Path) -> list[dict[str, Any]]:
    """Atoll's individuals in the order the worker evaluated them: params and setup_seconds."""
    record = atoll_search(RANKS, ["search.islands=1", f"search.generations={INDIVIDUALS}",
                                  f"search.ranks_per_worker={RANKS}",
                                  "objective.options.epochs=1",
                                  "objective.options.num_workers=0"], workdir, "atoll")
    individuals = sorted(record.individuals, key=lambda row: float(row["started"]))
    epochs = record.epochs[record.epochs["epoch"] == 0]
    setup = {int(row["individual"]): float(row["setup_seconds"]) for row in epochs}
    got = [{"id": int(row["id"]), "params": {p: value_of(row[p]) for p in PARAMETERS},
            "setup_seconds": setup[int(row["id"])]} for row in individuals]
    if len(got) != INDIVIDUALS or len(setup) != INDIVIDUALS:
        raise RuntimeError(f"atoll: {len(got)} individuals, {len(setup)} with setup_seconds, "
                           f"expected {INDIVIDUALS}; run in {workdir / 'atoll'}")
    return got


def tutorial_side(params: list[dict[str, Any]], workdir: Path) -> list[dict[str, float]]:
    spec = workdir / "tutorial-in.json"
    out = workdir / "tutorial-out.json"
    spec.write_text(json.dumps({"individuals": params, "batch_size": 8, "num_workers": 2}))
    mpirun(RANKS, [str(HERE / "tutorial_recipe.py"), str(spec), str(out)], workdir, "tutorial")
    results: list[dict[str, float]] = json.loads(out.read_text())
    return results


def _ms(values: list[float]) -> str:
    return ", ".join(f"{v * 1e3:.1f}" for v in values)


def run(log: Any = print) -> tuple[list[Row], list[str]]:
    workdir = Path(tempfile.mkdtemp(prefix="bench-ddp-setup-"))
    atoll: list[list[dict[str, Any]]] = []
    tutorial: list[list[dict[str, float]]] = []
    params: list[dict[str, Any]] = []
    for rnd in range(ROUNDS):  # A T, then T A: a slow or fast spell hits both sides alike
        order = ("atoll", "tutorial") if rnd % 2 == 0 else ("tutorial", "atoll")
        for side in order:
            where = workdir / f"round{rnd}"
            where.mkdir(exist_ok=True)
            if side == "atoll":
                got = atoll_side(where)
                if params and [g["params"] for g in got] != params:
                    raise RuntimeError("atoll: a rerun of the same single-worker search "
                                       f"evaluated other parameters; runs under {workdir}")
                params = [g["params"] for g in got]
                atoll.append(got)
            else:
                tutorial.append(tutorial_side(params, where))
    a_runs = [[ind["setup_seconds"] for ind in one] for one in atoll]
    t_runs = [[ind["setup_seconds"] for ind in one] for one in tutorial]
    a_med = statistics.median(v for one in a_runs for v in one[1:])
    t_med = statistics.median(v for one in t_runs for v in one[1:])
    a_first = statistics.median(one[0] for one in a_runs)
    t_first = statistics.median(one[0] for one in t_runs)
    ratio = a_med / t_med
    parts = {key: statistics.median(r[key] for one in tutorial for r in one[1:])
             for key in ("process_group", "read_data", "loaders", "model_ddp", "first_batch")}
    parts_text = ", ".join(f"{k} {v * 1e3:.1f}" for k, v in parts.items())
    firsts = "; ".join(", ".join(f"{k} {one[0][k] * 1e3:.1f}" for k in parts)
                       for one in tutorial)
    runs_text = "; ".join(f"round {i + 1}: Atoll {_ms(a)} / tutorial {_ms(t)}"
                          for i, (a, t) in enumerate(zip(a_runs, t_runs, strict=True)))
    log(f"  DDP setup per individual (ms), {runs_text}")
    log(f"  tutorial recipe, median parts of individuals 2..{INDIVIDUALS} (ms): {parts_text}")
    notes = [
        f"DDP setup per individual, 2-rank worker, digits, {INDIVIDUALS} individuals in "
        f"evaluation order, {ROUNDS} rounds (Atoll first, then the tutorial first), (ms): "
        f"{runs_text}. The same parameters on both sides and in every round: "
        f"{json.dumps(params)}",
        f"DDP setup, tutorial recipe, median of individuals 2..{INDIVIDUALS} by part (ms): "
        f"{parts_text} (first_batch = iter(loader), which forks the 2 loader processes, and "
        f"the first batch); its first individuals: {firsts}",
    ]
    row = Row(f"DDP setup per individual (2-rank worker, digits): median of individuals "
              f"2..{INDIVIDUALS} over {ROUNDS} rounds (median 1st individual in brackets: "
              "one-time costs)",
              f"{a_med * 1e3:.1f} ms (1st {a_first:.2f} s)",
              f"tutorial recipe {t_med * 1e3:.1f} ms (1st {t_first:.2f} s)",
              f"{ratio:.3f}", f"<= {TARGET:.2f} (medians of 2..{INDIVIDUALS})", ratio <= TARGET)
    shutil.rmtree(workdir)  # kept only when something failed
    return [row], notes


if __name__ == "__main__":
    common.standalone(run)
