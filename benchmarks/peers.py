"""10. Quality at 10 dimensions: Atoll's strategies against Propulate's default and Optuna 5's
TPE and CMA-ES samplers, on 4 and 8 ranks with 400 and 2000 evaluations.

Every contender runs the same objective (benchmarks/objectives.py at DIMENSIONS dimensions,
evaluations that sleep 2 ms), the same budget split evenly over the ranks, the same seeds; one
mpirun per search. The contenders:

- Atoll's GA on 2 islands with real migration (probability 0.1 per worker and evaluation, as in
  the quality rows), population 2 x the workers of an island, with the step adapted by the
  success rule (``sigma_rule = "success"``, the default) and with Propulate's fixed step;
- Atoll's CMA-ES: ``evolution.strategy = "cmaes"`` on 1 island (every worker learns every
  result, as Optuna's workers share one study);
- Atoll's mixed islands: ``evolution.island_strategies = ["ga", "cmaes"]``, 2 islands, the
  same migration as the GA;
- Atoll's hybrid, the default (``[evolution]`` left at its defaults), on 1 island: CMA-ES and
  the GA breed for one population, each candidate from the one with more recent new bests, with
  a floor for the other that grows while the island stalls;
- Propulate 1.2.2's default propagator, 2 islands, as in the quality rows;
- Optuna 5 with ``TPESampler`` and with ``CmaEsSampler`` (its defaults), one study per search
  in a journal file that every rank shares (benchmarks/optuna_side.py).

The medians are over SEEDS seeds. Verdicts, per row, on Atoll's default (DEFAULT, the hybrid:
``evolution`` left at its defaults, 1 island), as the default-search issue sets them:

- its median best loss is at most NEAR x the best contender's median (Atoll's or a peer's);
- its worst seed is no worse than Propulate's median;
- it is not worse than Propulate's default (the quality rows' one-sided rank test at level
  ALPHA).

Optuna's samplers cost tens of milliseconds per trial with a journal file (every trial reads
the study), so the whole table (PRESETS["full"]: four layouts, 10 seeds) takes hours and is
``make bench-full``'s; ``make bench`` runs PRESETS["quick"]. BENCH_PEER_SEEDS and
BENCH_PEER_LAYOUTS override either (e.g. "8x2000,4x400": ranks x evaluations, in that order).
``make bench-full`` keeps each search's result (benchmarks/search_cache.py), so a run stopped
part-way goes on where it stopped; its notes say which results earlier runs measured.
"""

from __future__ import annotations

import os
import statistics
from typing import Any

from common import Row, ensure_optuna_venv, ensure_propulate_venv, fmt, launch
from quality import ALPHA, JUDGED_SLEEP, better, p_worse
from search_cache import SearchCache
from throughput import task

DIMENSIONS = 10
FUNCTIONS = ("sphere", "rosenbrock", "griewank", "ackley", "rastrigin", "schwefel")
PRESETS = {"quick": ("8x400", 5), "full": ("4x400,8x400,4x2000,8x2000", 10)}
"""Layouts (ranks x evaluations) and seeds of ``make bench`` and ``make bench-full``."""
OPTUNA_BATCHED = 400
"""Optuna's searches of at most this many trials share one launch for all seeds."""
LAYOUTS: tuple[tuple[int, ...], ...] = ()
SEEDS: tuple[int, ...] = ()
CACHE: SearchCache | None = None
"""Where each search's result is kept (``make bench-full``), or None to keep nothing."""


def configure(preset: str) -> None:
    """Set LAYOUTS and SEEDS from a preset, unless BENCH_PEER_LAYOUTS/_SEEDS say otherwise."""
    global LAYOUTS, SEEDS
    layouts, seeds = PRESETS[preset]
    LAYOUTS = tuple(tuple(int(n) for n in layout.split("x")) for layout in os.environ.get(
        "BENCH_PEER_LAYOUTS", layouts).split(","))
    SEEDS = tuple(range(1, 1 + int(os.environ.get("BENCH_PEER_SEEDS", seeds))))


configure("full")

# name: (side, islands, what the task adds)
CONTENDERS: dict[str, tuple[str, int, dict[str, Any]]] = {
    "Atoll GA, fixed step": ("atoll", 2, {"evolution": {"strategy": "ga",
                                                        "sigma_rule": "fixed"}}),
    "Atoll GA, success rule": ("atoll", 2, {"evolution": {"strategy": "ga",
                                                          "sigma_rule": "success"}}),
    "Atoll CMA-ES": ("atoll", 1, {"evolution": {"strategy": "cmaes"}}),
    "Atoll mixed": ("atoll", 2, {"evolution": {"island_strategies": ["ga", "cmaes"],
                                               "sigma_rule": "success"}}),
    "Atoll hybrid (default)": ("atoll", 1, {"evolution": {}}),
    "Propulate": ("propulate", 2, {}),
    "Optuna TPE": ("optuna", 1, {"sampler": "tpe"}),
    "Optuna CMA-ES": ("optuna", 1, {"sampler": "cmaes"}),
}
ATOLL = tuple(name for name in CONTENDERS if name.startswith("Atoll"))
DEFAULT = "Atoll hybrid (default)"
NEAR = 1.5
GA = "Atoll GA, success rule"
PEERS = tuple(name for name in CONTENDERS if name not in ATOLL)


def best_losses(name: str, function: str, ranks: int, evaluations: int) -> list[float]:
    """The best loss of each seed's search by one contender (from CACHE where it has them)."""
    side, islands, extra = CONTENDERS[name]
    tasks = [{**task(JUDGED_SLEEP, evaluations // ranks, seed, ranks=ranks, islands=islands,
                     function=function), "dims": DIMENSIONS, **extra} for seed in SEEDS]
    kept = [CACHE.get(side, t) if CACHE else None for t in tasks]
    missing = [t for t, r in zip(tasks, kept, strict=True) if r is None]
    fresh = iter(_search(side, ranks, evaluations, missing))
    results = [r if r is not None else next(fresh) for r in kept]
    for t, r in zip(tasks, results, strict=True):
        if r["evaluations"] != evaluations:
            raise RuntimeError(f"{name} {function} seed {t['seed']}: {r['evaluations']} "
                               f"evaluations, expected {evaluations}")
    return [r["best"] for r in results]


def _search(side: str, ranks: int, evaluations: int,
            tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run ``tasks``, keeping each result in CACHE as soon as its launch ends."""
    # Optuna at 2000 trials: one mpirun per seed (its TPE needs a minute or more for one such
    # search here, and a launch has LAUNCH_TIMEOUT); every other search runs all seeds in one
    # launch, as the quality rows do.
    one_each = side == "optuna" and evaluations > OPTUNA_BATCHED
    batches = [[t] for t in tasks] if one_each else [tasks] if tasks else []
    results = []
    for batch in batches:
        got = launch(side, ranks, batch).results
        for t, r in zip(batch, got, strict=True):
            if CACHE:
                CACHE.put(side, t, r)
        results += got
    return results


def verdict(losses: dict[str, list[float]]) -> tuple[str, bool]:
    """The row's target text and whether the default meets it."""
    medians = {name: statistics.median(v) for name, v in losses.items()}
    best = min(medians, key=lambda name: medians[name])
    propulate = medians["Propulate"]
    p_value = p_worse(losses[DEFAULT], losses["Propulate"])
    near = medians[DEFAULT] <= NEAR * medians[best]
    worst = max(losses[DEFAULT]) <= propulate
    return (f"default <= {NEAR:g} x best ({best}); worst seed ({fmt(max(losses[DEFAULT]))}) "
            f"<= Propulate's median ({fmt(propulate)}); not worse than Propulate (p = "
            f"{p_value:.2g} >= {ALPHA})",
            near and worst and p_value >= ALPHA)


def run(log: Any = print) -> tuple[list[Row], list[str]]:
    ensure_propulate_venv()
    ensure_optuna_venv()
    # The peers first: their results do not change with Atoll's code, so a cached run that was
    # stopped part-way has the slow part behind it.
    losses: dict[tuple[str, str, int, int], list[float]] = {}
    for name in (*PEERS, *ATOLL):
        for ranks, evaluations in LAYOUTS:
            for function in FUNCTIONS:
                losses[name, function, ranks, evaluations] = best_losses(
                    name, function, ranks, evaluations)
            log(f"  {name}, {ranks} ranks, {evaluations} evaluations: done")
    rows, notes = [], []
    for ranks, evaluations in LAYOUTS:
        for function in FUNCTIONS:
            row, note = _row({name: losses[name, function, ranks, evaluations]
                              for name in CONTENDERS}, function, ranks, evaluations, log)
            rows.append(row)
            notes.append(note)
    if CACHE:
        notes.append(f"peers: {CACHE.summary()}")
    return rows, notes


def _row(losses: dict[str, list[float]], function: str, ranks: int, evaluations: int,
         log: Any) -> tuple[Row, str]:
    """One layout's and function's row of the table, and its note of every seed's loss."""
    medians = {name: statistics.median(v) for name, v in losses.items()}
    target, met = verdict(losses)
    best = min(medians.values())
    atoll = " / ".join(fmt(medians[n]) for n in ATOLL)
    other = " / ".join(fmt(medians[n]) for n in PEERS)
    row = Row(
        f"peers, {function} {DIMENSIONS}-d, {ranks} ranks, {evaluations} evaluations "
        f"of {JUDGED_SLEEP * 1e3:g} ms: median best loss over {len(SEEDS)} seeds "
        "(Atoll: GA with fixed step / GA with success rule / CMA-ES / mixed / hybrid, the "
        "default; other: Propulate / Optuna TPE / Optuna CMA-ES); ratio: the default / "
        "the best contender", atoll, other,
        f"{medians[DEFAULT] / best:.2g}" if best > 0 else "-", target, met)
    log(f"  {function}, {ranks} ranks, {evaluations}: " + ", ".join(
        f"{n} {fmt(m)}" for n, m in medians.items()) + f"; {target}: "
        f"{'met' if met else 'MISSED'}")
    note = (f"peers, {function} {ranks} ranks {evaluations} evaluations, best losses by seed "
            + "; ".join(f"{n}: {', '.join(f'{v:.3g}' for v in vs)}" for n, vs in losses.items())
            + f"; P({DEFAULT} beats Propulate) = "
            f"{better(losses[DEFAULT], losses['Propulate']):.2f}, P(it beats the GA) = "
            f"{better(losses[DEFAULT], losses[GA]):.2f}")
    return row, note


if __name__ == "__main__":
    from common import standalone

    standalone(run)
