"""Objectives the tests name as ``objectives:NAME`` (tests/ is put on PYTHONPATH)."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Mapping
from typing import Any

from atoll.objectives.benchmarks import BENCHMARKS


def slow_sphere(params: Mapping[str, Any], ctx: Any) -> float:
    """Sphere that takes ``options.sleep`` seconds, reporting two epochs on the way."""
    pause = float(ctx.options.get("sleep", 0.01))
    for epoch in range(2):
        time.sleep(pause / 2)
        ctx.report(epoch, half=float(epoch))
    return BENCHMARKS["sphere"](params, ctx)


def uneven(params: Mapping[str, Any], ctx: Any) -> float:
    """Sphere that takes ``options.slow`` seconds on world rank 0 and ``options.fast`` on every
    other rank: one worker far slower than its partners. With ``options.epochs``, that time is
    spread over as many reported epochs (with ``options.poll``, as many stop checks instead, as
    a command objective's worker makes while its script is silent)."""
    from mpi4py import MPI

    slow = MPI.COMM_WORLD.Get_rank() == 0
    seconds = float(ctx.options["slow" if slow else "fast"])
    loss = BENCHMARKS["sphere"](params, ctx)
    epochs = int(ctx.options.get("epochs", 0))
    if not epochs:
        time.sleep(seconds)
    for epoch in range(epochs):
        time.sleep(seconds / epochs)
        if ctx.options.get("poll"):
            ctx.stop_requested()
        else:
            ctx.report(epoch, loss=loss)
    return loss


def flaky(params: Mapping[str, Any], ctx: Any) -> Any:
    """Sphere that fails in the way ``options.way`` for a fraction ``options.rate`` of
    individuals (the draw comes from ctx.rng, so every rank of a worker agrees)."""
    if float(ctx.rng.random()) >= float(ctx.options.get("rate", 0.2)):
        return BENCHMARKS["sphere"](params, ctx)
    way = ctx.options["way"]
    if way == "raise":
        raise ValueError("flaky objective failed on purpose")
    if way == "returns_nan":
        return float("nan")
    if way == "returns_inf":
        return float("inf")
    if way == "returns_text":
        return "not a number"
    if way == "returns_huge":
        return 10**400  # no float holds it
    if way == "exits":
        sys.exit(2)
    if way == "interrupts":
        raise KeyboardInterrupt
    if way == "runaway":
        time.sleep(60)
    if way == "one_rank_raises":
        import torch
        import torch.distributed as dist

        ctx.process_group  # noqa: B018 - the worker's group, made on every rank
        if ctx.rank == ctx.size - 1:
            raise RuntimeError("only the last rank failed")
        dist.all_reduce(torch.ones(1))  # the partners wait here until the group's timeout
    return BENCHMARKS["sphere"](params, ctx)


def store_address(params: Mapping[str, Any], ctx: Any) -> float:
    """Reports where the worker's rendezvous store listens (from /proc/net/tcp) and the
    identity of the worker's group, so tests can check both from the record."""
    ctx.process_group  # noqa: B018 - made on every rank of the worker
    group = ctx._services.group.current  # the live group: its store is the engine's, not ctx's
    port = f"{group.store.port:04X}"
    listening = [line.split()[1] for line in open("/proc/net/tcp").read().splitlines()[1:]
                 if line.split()[1].endswith(":" + port) and line.split()[3] == "0A"]
    loopback = float(listening == ["0100007F:" + port])
    ctx.report(0, loopback=loopback, group=float(id(group) % 1_000_003),
               store_port=float(group.store.port))
    return BENCHMARKS["sphere"](params, ctx)


def report_demo(params: Mapping[str, Any], ctx: Any) -> float:
    """What a report shows, quickly: three epochs of val_loss and val_accuracy, and a
    ValueError for a fraction ``options.fail`` of individuals (drawn from ctx.rng)."""
    if float(ctx.rng.random()) < float(ctx.options.get("fail", 0.0)):
        raise ValueError("report_demo failed on purpose")
    pause = float(ctx.options.get("sleep", 0.0))
    loss = _demo_loss(params)
    for epoch in range(3):
        time.sleep(pause)
        scale = 1.0 + 0.5 * (2 - epoch)
        ctx.report(epoch, val_loss=loss * scale, val_accuracy=1.0 / (1.0 + loss * scale))
    return loss


def _demo_loss(params: Mapping[str, Any]) -> float:
    """Lowest at lr = 1e-2 with relu and one layer."""
    penalty = {"relu": 0.0, "tanh": 0.3, "sigmoid": 1.0}[params["act"]]
    return (math.log10(params["lr"]) + 2.0) ** 2 + penalty + 0.05 * params["layers"] + 0.01


def lr_only(params: Mapping[str, Any], ctx: Any) -> float:
    """report_demo's parameters, of which only ``lr`` matters: the loss of lr alone."""
    return (math.log10(params["lr"]) + 2.0) ** 2 + 0.01


def accuracy_demo(params: Mapping[str, Any], ctx: Any) -> float:
    """A score to maximize: report_demo's epochs, returning its last val_accuracy."""
    report_demo(params, ctx)
    return 1.0 / (1.0 + _demo_loss(params))


def pruning_demo(params: Mapping[str, Any], ctx: Any) -> float:
    """A flat curve: val_loss = x at each of ``options.epochs`` epochs (of ``options.sleep``
    seconds; with ``options.checkpoint``, a checkpoint after each, continued from). Every rank
    appends the epochs it ran to ``options.trace``/ID-rankR.txt and joins an allreduce per
    epoch, so ranks that stopped at different epochs would hang instead of passing."""
    from pathlib import Path

    trace = Path(ctx.options["trace"]) / f"{ctx.individual_id}-rank{ctx.rank}.txt"
    value = float(params["x"])
    keeps = bool(ctx.options.get("checkpoint"))
    saved = ctx.load_checkpoint() if keeps else None
    for epoch in range(saved.epoch + 1 if saved else 0, int(ctx.options.get("epochs", 4))):
        time.sleep(float(ctx.options.get("sleep", 0.0)))
        ctx.comm.allreduce(epoch)
        with trace.open("a") as f:
            f.write(f"{epoch}\n")
        stop = ctx.report(epoch, val_loss=value)
        if keeps:
            ctx.save_checkpoint({"x": value}, epoch)
        if stop:
            break
    return value


def stopped_at_a_rung(params: Mapping[str, Any], ctx: Any) -> float:
    """val_loss 0.1 at each of 4 epochs; individual 1 reports 100 at epoch 0 right after
    asking its own job to stop (SIGTERM to its process): the stop meets the rung there."""
    import os
    import signal

    value = 0.1
    for epoch in range(4):
        if ctx.individual_id == 1:
            os.kill(os.getpid(), signal.SIGTERM)
            value = 100.0
        if ctx.report(epoch, val_loss=value):
            break
    return value


def checkpointed(params: Mapping[str, Any], ctx: Any) -> float:
    """``options.epochs`` epochs of ``options.sleep`` seconds that keep a checkpoint after each
    (the list of epochs trained) and continue from it; each epoch is appended to
    ``options.trace``/ID.txt. Returns how many epochs the state holds: ``epochs`` when every
    epoch was trained once, in one part or several."""
    from pathlib import Path

    saved = ctx.load_checkpoint()
    trained = list(saved.state["trained"]) if saved is not None else []
    trace = Path(ctx.options["trace"]) / f"{ctx.individual_id}.txt"
    for epoch in range(saved.epoch + 1 if saved is not None else 0,
                       int(ctx.options.get("epochs", 6))):
        time.sleep(float(ctx.options.get("sleep", 0.1)))
        trained.append(epoch)
        if ctx.rank == 0:
            with trace.open("a") as f:
                f.write(f"{epoch}\n")
        stop = ctx.report(epoch, val_loss=float(params["x0"]) ** 2)
        ctx.save_checkpoint({"trained": trained}, epoch)
        if stop:
            break
    return float(len(trained))


def quick_then_still(params: Mapping[str, Any], ctx: Any) -> float:
    """Even ids: :func:`checkpointed`. Odd ids: work that reports no epoch (so nothing flushes
    the record meanwhile), marked by ``options.trace``/still-ID, until ``options.trace``/go
    exists."""
    from pathlib import Path

    if ctx.individual_id % 2 == 0:
        return checkpointed(params, ctx)
    trace = Path(ctx.options["trace"])
    (trace / f"still-{ctx.individual_id}").touch()
    deadline = time.monotonic() + 120
    while not (trace / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return 1.0


def lineage_demo(params: Mapping[str, Any], ctx: Any) -> float:
    """``options.epochs`` (2) epochs from scratch, or numbered on from the checkpoint it
    inherits (as the classifier does), or continued from its own; val_loss = x0**2 + 1 /
    (epochs its state holds + 1), so inherited training pays. Returns the last val_loss. The
    epochs trained are appended to ``options.trace``/ID.txt, if given."""
    from pathlib import Path

    folder = ctx.options.get("trace")
    saved = ctx.load_checkpoint()
    held = int(saved.state["held"]) if saved is not None else 0
    first = 0 if ctx.inherited is None else ctx.inherited.epoch + 1
    value = float(params["x0"]) ** 2 + 1.0 / (held + 1)
    for epoch in range(saved.epoch + 1 if saved is not None else 0,
                       first + int(ctx.options.get("epochs", 2))):
        held += 1
        value = float(params["x0"]) ** 2 + 1.0 / (held + 1)
        if folder:
            with (Path(folder) / f"{ctx.individual_id}.txt").open("a") as f:
                f.write(f"{epoch}\n")
        stop = ctx.report(epoch, val_loss=value)
        ctx.save_checkpoint({"held": held}, epoch)
        if stop:
            break
    return value


LINEAGE_DEMO = """[objective]
name = "objectives:lineage_demo"
[space.x0]
type = "float"
low = -1.0
high = 1.0
"""
"""Its objective and space, the head of a real search's config."""


def promotion_demo(params: Mapping[str, Any], ctx: Any) -> float:
    """``options.epochs`` epochs of val_loss = x + drift * id + 1 / (epoch + 1) (a positive
    ``options.drift`` makes later individuals worse, so paused ones soon qualify for
    promotion), continued from the checkpoint kept after each epoch (unless
    ``options.checkpoints`` is false); each epoch takes ``options.sleep`` seconds (0). Every rank
    appends the epochs it trains to ``options.trace``/ID-rankR.txt (if given) and joins an
    allreduce per epoch, so ranks that stopped at different epochs would hang instead of
    passing."""
    from pathlib import Path

    keep = bool(ctx.options.get("checkpoints", True))
    saved = ctx.load_checkpoint() if keep else None
    folder = ctx.options.get("trace")
    trace = Path(folder) / f"{ctx.individual_id}-rank{ctx.rank}.txt" if folder else None
    value = float(params["x"]) + float(ctx.options.get("drift", 0.0)) * ctx.individual_id
    for epoch in range(saved.epoch + 1 if saved is not None else 0,
                       int(ctx.options.get("epochs", 4))):
        ctx.comm.allreduce(epoch)
        time.sleep(float(ctx.options.get("sleep", 0.0)))
        if trace is not None:
            with trace.open("a") as f:
                f.write(f"{epoch}\n")
        if keep:
            ctx.save_checkpoint({"epoch": epoch}, epoch)
        if ctx.report(epoch, val_loss=value + 1.0 / (epoch + 1)):
            break
    return value


def then_still(params: Mapping[str, Any], ctx: Any) -> float:
    """On a worker of one rank: ``options.inner`` (``promotion_demo`` or ``lineage_demo``,
    tracing into ``options.trace``). The first evaluation that ends after continuing its own
    checkpoint (``options.mark = "promoted"``) or after inheriting one (``"inherited"``) leaves
    ``options.trace``/marked-ID; the next evaluation then reports nothing (so nothing flushes
    the record), marked by still-ID, until ``options.trace``/go exists. Each evaluation (each
    part of a continued one) appends a line to ``options.trace``/parts-ID.txt."""
    from pathlib import Path

    trace = Path(ctx.options["trace"])
    with (trace / f"parts-{ctx.individual_id}.txt").open("a") as f:
        f.write("part\n")
    if list(trace.glob("marked-*")) and not list(trace.glob("still-*")):
        (trace / f"still-{ctx.individual_id}").touch()
        deadline = time.monotonic() + 120
        while not (trace / "go").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    inner = ctx.options["inner"]
    before = trace / (f"{ctx.individual_id}-rank0.txt" if inner == "promotion_demo"
                      else f"{ctx.individual_id}.txt")
    continued = before.exists() and before.read_text().strip() != ""
    value = float(globals()[inner](params, ctx))
    marks = continued if ctx.options["mark"] == "promoted" else ctx.inherited is not None
    if marks and not list(trace.glob("marked-*")):
        (trace / f"marked-{ctx.individual_id}").touch()
    return value


def offers_every_epoch(params: Mapping[str, Any], ctx: Any) -> float:
    """Sphere reached at epoch 2 of a U-shaped curve of six epochs; the weights (a tensor
    holding the epoch's loss) are offered at every epoch, better or worse; returns the best."""
    import torch

    best = BENCHMARKS["sphere"](params, ctx)
    for epoch in range(6):
        loss = best * (1.0 + (epoch - 2) ** 2 / 4)
        ctx.report(epoch, val_loss=loss)
        ctx.keep_weights({"w": torch.full((3,), loss, dtype=torch.float64)}, loss)
    return best


def weights_on_a_follower(params: Mapping[str, Any], ctx: Any) -> float:
    """Offers its weights on the worker's rank 1 only, whose offer keeps nothing."""
    import torch

    loss = BENCHMARKS["sphere"](params, ctx)
    if ctx.rank == 1:
        ctx.keep_weights({"w": torch.zeros(3)}, loss)
    return loss


def misused_weights(params: Mapping[str, Any], ctx: Any) -> float:
    """Offers a DDP model's state_dict as DDP gives it (every key under ``module.``), and
    first a NaN loss; from the second call on, also reports through the ctx of the first call,
    kept in a global (``options.keep_ctx``)."""
    import torch

    loss = BENCHMARKS["sphere"](params, ctx)
    ctx.keep_weights({"module.w": torch.zeros(3)}, math.nan)
    ctx.keep_weights({"module.w": torch.full((3,), loss, dtype=torch.float64),
                      "module.b": torch.ones(1)}, loss)
    if ctx.options.get("keep_ctx"):
        if _KEPT:
            _KEPT[0].report(0, val_loss=12345.0)
        _KEPT.append(ctx)
    return loss


_KEPT: list[Any] = []


def split_reports(params: Mapping[str, Any], ctx: Any) -> float:
    """Two epochs, each reported in two calls (``train_loss``, then ``val_loss``) with the
    metrics computed on the leader only (the others pass None), the habit of DDP scripts; or
    with ``options.epoch_step`` (0.5) fractional epochs."""
    step = float(ctx.options.get("epoch_step", 1))
    loss = BENCHMARKS["sphere"](params, ctx)
    for k in range(2):
        epoch = k * step if step != 1 else k
        ctx.report(epoch, train_loss=(loss + 1 - k) if ctx.is_leader else None)
        ctx.report(epoch, val_loss=(loss + 2 - k) if ctx.is_leader else None)
    return loss


def collective_on_some_ranks(params: Mapping[str, Any], ctx: Any) -> float:
    """Sphere that, for a fraction ``options.rate`` of individuals (drawn from ctx.rng, so
    every rank agrees), misuses a collective call in the way ``options.way``: ``leader_reports``
    (the "log on rank 0" habit), ``follower_busy`` (the leader reports while the follower
    sleeps ``options.sleep`` s, then ends), ``follower_device`` (only the follower asks for
    ctx.device), ``leader_late`` (every rank reports, the leader after ``options.sleep`` s)."""
    if float(ctx.rng.random()) < float(ctx.options.get("rate", 0.3)):
        way = ctx.options["way"]
        if way == "leader_late":
            if ctx.is_leader:
                time.sleep(float(ctx.options["sleep"]))
            ctx.report(0, val_loss=1.0)
        elif way in ("leader_reports", "follower_busy") and ctx.is_leader:
            ctx.report(0, val_loss=1.0)
        elif way == "follower_busy":
            time.sleep(float(ctx.options["sleep"]))
        elif way == "follower_device" and not ctx.is_leader:
            ctx.device  # noqa: B018 - the first use, on this rank only
    return BENCHMARKS["sphere"](params, ctx)
