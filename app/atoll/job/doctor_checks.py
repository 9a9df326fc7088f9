"""The judgement half of ``atoll doctor``: facts gathered from the ranks in, table rows out.

Pure functions (no MPI, no torch), so each verdict is tested on made-up facts; what each rank
sees and the collective run are in :mod:`atoll.job.doctor`.
"""

from __future__ import annotations

import textwrap
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from atoll.config import Config
from atoll.engine.topology import Layout
from atoll.errors import AtollError, ranks_text
from atoll.exit_codes import EXIT_BAD_INPUT, EXIT_OK
from atoll.job.plan import job_layout, run_budget
from atoll.objectives.launch_env import listed_gpus, worker_gpus

OK, WARN, FAIL, SKIP = "ok", "warn", "FAIL", "skip"
LOCK_VARIABLE = "HDF5_USE_FILE_LOCKING"



@dataclass(frozen=True)
class Row:
    """One line of the table: what was checked, how it went, and what to do about it."""

    check: str
    status: str
    detail: str


@dataclass(frozen=True)
class Report:
    """What rank 0 prints, and the exit code every rank returns."""

    rows: tuple[Row, ...]
    exit_code: int
    text: str = ""
    refusal: str = ""  # the line the search prints when it refuses to start here, if it does


def mpi_rows(nodes: Sequence[str], library: str) -> list[Row]:
    """Ranks and where they run (``nodes[rank]``: the SLURM node name, else the host name)."""
    by_node: dict[str, list[int]] = defaultdict(list)
    for rank, node in enumerate(nodes):
        by_node[node].append(rank)
    hosts = [f"{node}: ranks {ranks_text(ranks)}" for node, ranks in by_node.items()]
    if len(hosts) > 6:
        hosts = [*hosts[:5], f"... and {len(hosts) - 5} more hosts"]
    return [Row("MPI", OK, f"{library}; {len(nodes)} rank(s) on {len(by_node)} host(s)"),
            Row("hosts", OK, "; ".join(hosts))]


def layout_rows(config: Config, world_size: int) -> tuple[Layout | None, list[Row]]:
    """The workers, islands and leaders this config gets on this many ranks."""
    search = config.search
    try:
        layout = job_layout(config, world_size)
        budget = run_budget(config, layout.workers)
    except AtollError as exc:
        return None, [Row("layout", FAIL, str(exc))]
    lowered = [Row("islands", WARN, f"search.islands={search.islands} is more than the "
                                    f"{layout.workers} worker(s): the search runs "
                                    f"{layout.islands} island(s)")] \
        if layout.islands < search.islands else []
    leaders = [w * layout.ranks_per_worker for w in range(layout.workers)]
    islands = "; ".join(f"island {i}: workers {ranks_text(layout.workers_on_island(i))}"
                        for i in range(min(layout.islands, 4)))
    if layout.islands > 4:
        islands += f"; ... ({layout.islands} islands)"
    capped = ", capped by search.max_evaluations" if search.max_evaluations else ""
    how = "search.evaluations" if search.evaluations else \
        f"{search.generations} per worker x {layout.workers} workers{capped}"
    return layout, [*lowered,
        Row("layout", OK, f"{layout.workers} worker(s) of {layout.ranks_per_worker} rank(s), "
                          f"{layout.islands} island(s); leaders: ranks {ranks_text(leaders)}; "
                          f"{islands}"),
        Row("budget", OK, f"{budget} evaluations ({how}) for a new run")]


def gpu_rows(views: Sequence[dict[str, Any]]) -> list[Row]:
    """Which GPU each rank will use; two ranks of one host on one GPU is an error.

    A view per rank: ``rank``, ``node``, ``visible`` (CUDA_VISIBLE_DEVICES or None), ``count``
    (devices torch sees; None without torch), ``device`` (the index this rank will use, None
    for a CPU run), ``uuid`` and ``name`` of that device (None if unknown).
    """
    using = [v for v in views if v["device"] is not None]
    if not using:
        granted = [v for v in views if listed_gpus(v.get("visible"))]
        grants: dict[tuple[str, str], list[int]] = defaultdict(list)
        for v in granted:
            grants[(v["node"], v["visible"])].append(v["rank"])
        shared = [Row("GPUs", WARN, f"ranks {ranks_text(ranks)} on {node} are granted the same "
                                    f"GPUs (CUDA_VISIBLE_DEVICES={visible!r}): torch sees no "
                                    "CUDA device here, so this runs on CPUs (gloo); with CUDA "
                                    "they would share a GPU and the search would fail (one task "
                                    "per GPU, or --gpus-per-task=1)")
                  for (node, visible), ranks in grants.items()
                  if len(ranks) > len(listed_gpus(visible))]
        if granted:
            first = granted[0]
            return shared + [Row("GPUs", WARN,
                                 f"CUDA_VISIBLE_DEVICES is set on {len(granted)} rank(s) (rank "
                                 f"{first['rank']}: {first['visible']!r}) but torch uses no "
                                 "CUDA device there: a CPU run (gloo)")]
        return [Row("GPUs", OK, "none visible: a CPU run (gloo)")]
    holders: dict[tuple[str, str], list[int]] = defaultdict(list)
    for v in using:
        holders[(v["node"], v["uuid"] or _physical(v))].append(v["rank"])
    rows = [Row("GPUs", FAIL, f"ranks {ranks_text(ranks)} on {node} share GPU {gpu}: give each "
                              "rank its own GPU (one task per GPU, every GPU of the node "
                              "visible to each task, or --gpus-per-task=1)")
            for (node, gpu), ranks in holders.items() if len(ranks) > 1]
    idle = [v["rank"] for v in views if v["device"] is None]
    if idle:
        rows.append(Row("GPUs", WARN, f"ranks {ranks_text(idle)} see no GPU while others do"))
    by_node: dict[str, list[str]] = defaultdict(list)
    for v in using:
        by_node[v["node"]].append(f"{v['rank']}->cuda:{v['device']}")
    names = sorted({v["name"] for v in using if v.get("name")})
    mapping = "; ".join(f"{node}: {', '.join(items)}" for node, items in by_node.items())
    rows.append(Row("GPUs", OK if not rows else WARN,
                    f"{len(using)} rank(s) on GPUs ({', '.join(names) or 'unknown model'}); "
                    f"rank->device: {mapping}"))
    return rows


def command_gpu_rows(seen: Sequence[tuple[int, str, tuple[str, ...]]]) -> list[Row]:
    """The ``CUDA_VISIBLE_DEVICES`` each worker's commands get on each host, from every rank's
    (worker, node, GPU share) in rank order (``objectives.launch_env``'s rule)."""
    if not any(share for _, _, share in seen):
        return [Row("command GPUs", OK, "none granted or found: the commands run on CPUs")]
    by_host: dict[tuple[int, str], list[tuple[str, ...]]] = defaultdict(list)
    for worker, node, share in seen:
        by_host[(worker, node)].append(share)
    listed, kept = [], []
    for (worker, node), shares in by_host.items():
        gpus = worker_gpus(shares)
        if gpus is None:
            kept.append(worker)
        else:
            listed.append(f"worker {worker} on {node}: {gpus}")
    rows = []
    if kept:
        rows.append(Row("command GPUs", WARN, f"workers {ranks_text(sorted(set(kept)))}: a rank "
                                              "without a GPU, or two ranks on one: each rank's "
                                              "command keeps the CUDA_VISIBLE_DEVICES it was "
                                              "given, and cuda:LOCAL_RANK may not be its own"))
    if listed:
        shown = "; ".join(listed[:4]) + (f"; ... ({len(listed)} in all)" if len(listed) > 4
                                         else "")
        rows.append(Row("command GPUs", OK, "CUDA_VISIBLE_DEVICES of each worker's commands, "
                                            f"each rank's first at its LOCAL_RANK: {shown}"))
    return rows


def _physical(view: dict[str, Any]) -> str:
    """A device's identity without a UUID: its entry in CUDA_VISIBLE_DEVICES, else its index."""
    visible = listed_gpus(view.get("visible"))
    index = view["device"]
    return visible[index] if index < len(visible) else str(index)


def cpu_rows(views: Sequence[dict[str, Any]]) -> list[Row]:
    """Threads per rank against the CPUs the ranks of each host may run on."""
    by_node: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for v in views:
        by_node[v["node"]].append(v)
    rows = []
    for node, ranks in by_node.items():
        cpus = set().union(*(set(v["cpus"]) for v in ranks))
        threads = sum(v["threads"] for v in ranks)
        bound = sum(len(v["cpus"]) for v in ranks) == len(cpus)
        omp = {v["omp"] for v in ranks}
        detail = (f"{node}: {len(ranks)} rank(s), {threads} thread(s) in all "
                  f"(OMP_NUM_THREADS={'/'.join(sorted(str(o) for o in omp))}), {len(cpus)} CPUs; "
                  f"{'each rank on its own CPUs' if bound else 'ranks share their CPUs'}")
        if threads > len(cpus):
            rows.append(Row("CPU threads", WARN, detail + ": more threads than CPUs (set "
                                                         "OMP_NUM_THREADS to the CPUs per task)"))
        else:
            rows.append(Row("CPU threads", OK, detail))
    return rows[:4] + ([Row("CPU threads", OK, f"... {len(rows) - 4} more hosts")]
                       if len(rows) > 4 else [])


def group_rows(probes: Sequence[dict[str, Any]]) -> list[Row]:
    """The torch process group of each worker: built or not, and how fast."""
    failed = [p for p in probes if p["error"]]
    rows = [Row("process group", FAIL, f"worker {p['worker']} (ranks {ranks_text(p['ranks'])}): "
                                       f"{p['error']}") for p in failed[:4]]
    if len(failed) > 4:
        rows.append(Row("process group", FAIL, f"... and {len(failed) - 4} more workers"))
    good = [p for p in probes if not p["error"]]
    if good:
        build = [p["build"] for p in good]
        reduce_ms = [p["all_reduce"] * 1e3 for p in good]
        slowest = max(good, key=lambda p: p["build"])
        backends = ", ".join(sorted({p["backend"] for p in good}))
        rows.append(Row("process group", OK,
                        f"{backends}: {len(good)} worker group(s) built in "
                        f"{min(build):.2f}-{max(build):.2f} s (slowest: worker "
                        f"{slowest['worker']}), all_reduce {min(reduce_ms):.2f}-"
                        f"{max(reduce_ms):.2f} ms (median of 10)"))
    return rows


def lock_rows(outcome: dict[str, Any]) -> list[Row]:
    """HDF5 locking in the run directory's filesystem, as the search uses it."""
    where, env = outcome["dir"], outcome["env"]
    setting = f" ({LOCK_VARIABLE}={env})" if env is not None else ""
    if outcome["create_error"]:
        if "lock" in outcome["create_error"].lower():
            return [Row("HDF5 locking", FAIL,
                        f"{where}: this filesystem refuses file locks "
                        f"({outcome['create_error']}); the search could not open run.h5: set "
                        f"{LOCK_VARIABLE}=FALSE for the job (and run one job per run directory "
                        "at a time)")]
        return [Row("HDF5 locking", FAIL, f"{where}: cannot create a file "
                                          f"({outcome['create_error']}); choose a writable run "
                                          "directory")]
    second = outcome["second"]
    if outcome["refused"]:
        return [Row("HDF5 locking", OK, f"honoured in {where}: a second open from {second} was "
                                        f"refused{setting}, so a second job on a run is refused")]
    if env is not None and env.upper() in ("FALSE", "0"):
        return [Row("HDF5 locking", OK, f"off{setting} in {where}: fine for the search; nothing "
                                        "stops two jobs on one run directory, so chain them")]
    if outcome["probe_error"]:
        return [Row("HDF5 locking", WARN, f"{where}: the second open from {second} failed "
                                          f"otherwise ({outcome['probe_error']})")]
    return [Row("HDF5 locking", WARN, f"not honoured in {where}: a second open from {second} "
                                      f"succeeded{setting}; nothing stops two jobs on one run: set "
                                      f"{LOCK_VARIABLE}=FALSE and chain jobs")]


def space_rows(config: Config, layout: Layout, where: Path, free: int, checkpoint: int = 0
               ) -> list[Row]:
    """Free space against an estimate of the run's record (not of model weights or epochs),
    and room for each worker to write a checkpoint as large as ``checkpoint`` (the largest the
    run keeps) beside the one it replaces."""
    from atoll.record.room import record_bytes, worker_row_bytes

    budget = run_budget(config, layout.workers)
    row = worker_row_bytes(config.space)
    need = record_bytes(config.space, budget, layout.workers) + layout.workers * checkpoint
    kept = f", {layout.workers} checkpoint(s) of {_size(checkpoint)}" if checkpoint else ""
    detail = (f"{_size(free)} free in {where}; the record needs about {_size(need)} (an "
              f"estimate: {budget} individuals of {row} B in worker files and results.h5, "
              f"which is rewritten beside itself{kept}; not counted: epoch rows and model "
              f"weights, record.top_models={config.record.top_models} x your network)")
    status = FAIL if free < need else WARN if free < 2 * need else OK
    return [Row("disk space", status, detail if status != FAIL else
                detail + ": free some space or choose another run directory")]


def paused_checkpoint_rows(config: Config, budget: int, checkpoint: int = 0) -> list[Row]:
    """Under ``asha`` every paused individual keeps its checkpoint until it is promoted, and
    after the run: with random candidates about ``eta**R - 1`` per completed evaluation (``R``
    rungs), so the checkpoints outnumber the budget many times over, each as large as the
    training state (``checkpoint``: the largest the run keeps now; a command's own directory
    is not in it). Said before the search, with what bounds them."""
    from atoll.scheduling.halving import rungs_below

    pruning, limit = config.pruning, config.record.checkpoint_limit_mb
    if not pruning.pauses:
        return []
    command = bool(config.objective.command)
    detail = ("pruning.rule = 'asha' keeps every paused individual's checkpoint until it is "
              "promoted, also after the run: ")
    if pruning.max_epochs:
        rungs = rungs_below(pruning.min_epochs, pruning.eta, pruning.max_epochs)
        each = pruning.eta ** rungs - 1
        size = (f"{_size(budget * each * checkpoint)} at the size of the largest checkpoint now"
                if checkpoint and not command else "each the size of your training state")
        detail += (f"up to about {each:,} per completed evaluation ({pruning.eta}^{rungs} - 1, "
                   f"{rungs} rung(s) below max_epochs), {budget * each:,} for a budget of "
                   f"{budget:,}, {size}")
    else:
        detail += ("up to about eta^R - 1 per completed evaluation, R the rungs it passes (set "
                   "pruning.max_epochs to have them counted)")
    quota = "check that the run directory's quota holds them"
    if command:
        return [Row("checkpoints", WARN, f"{detail}; record.checkpoint_limit_mb does not count "
                                         f"a command's own checkpoint directories: {quota}")]
    if limit > 0:
        return [Row("checkpoints", OK, f"{detail}; record.checkpoint_limit_mb = {limit:g} bounds "
                                       "them: a save past it is skipped with a warning, and an "
                                       "evaluation without a checkpoint at its rung stops there "
                                       "instead of pausing")]
    return [Row("checkpoints", WARN, f"{detail}; nothing bounds them: set "
                                     f"record.checkpoint_limit_mb, or {quota}")]


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"  # pragma: no cover - unreachable


def render(rows: Sequence[Row], header: str, width: int = 100) -> str:
    """The table a person reads: one row per finding, long details wrapped under themselves."""
    name = max(len("check"), *(len(r.check) for r in rows))
    indent = " " * (name + 10)
    lines = [header, f"{'check':<{name}}  status  detail", f"{'-' * name}  ------  " +
             "-" * (width - name - 10)]
    for r in rows:
        wrapped = textwrap.wrap(r.detail, width - name - 10, break_on_hyphens=False) or [""]
        lines.append(f"{r.check:<{name}}  {r.status:<6}  {wrapped[0]}")
        lines.extend(indent + more for more in wrapped[1:])
    failed = sum(r.status == FAIL for r in rows)
    warned = sum(r.status == WARN for r in rows)
    verdict = (f"{failed} check(s) failed: the search would fail here (exit {EXIT_BAD_INPUT})"
               if failed else f"ready ({warned} warning(s); exit {EXIT_OK})")
    return "\n".join([*lines, "", verdict])
