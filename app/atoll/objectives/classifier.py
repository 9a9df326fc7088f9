"""The built-in DDP image classifier: ``objective.name = "atoll.objectives.classifier:train"``.

The network of the tutorial: ``conv_layers`` convolutions of 10 channels (kernel 3, padding 1),
each followed by the activation, then a linear head and log-softmax; Adadelta with StepLR, NLL
loss, early stopping. It saves a checkpoint every epoch and continues from one (epochs numbered
on from where it stopped). A child that inherits (``[inherit]``, PBT) starts from its parent's
weights and optimizer state and trains ``inherited_epochs`` more epochs (``epochs`` when 0),
numbered on from the parent's: a child of a trained parent needs less training than a network
from scratch, so more candidates fit in the same GPU hours;
when the shapes differ (``conv_layers``), it declines them and trains from scratch. Every rank
of the worker trains one DDP replica on an exclusive shard of the training set; validation is
sharded without duplicates and its loss and accuracy are summed over the whole validation set,
so every rank reports the same numbers, equal to what one process would compute alone.

Parameters (the search space): ``conv_layers`` (int), ``activation`` (relu, sigmoid, tanh),
``lr`` (float), ``gamma`` (float). Options (``[objective.options]``): see :data:`OPTIONS`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from atoll.errors import ObjectiveError
from atoll.evaluation.context import Context
from atoll.objectives import data as datasets
from atoll.objectives.data import ImageSet

ACTIVATIONS: dict[str, type[nn.Module]] = {"relu": nn.ReLU, "sigmoid": nn.Sigmoid,
                                           "tanh": nn.Tanh}
CHANNELS = 10
PARAMETERS = ("conv_layers", "activation", "lr", "gamma")
OPTIONS: dict[str, Any] = {
    "dataset": "digits",  # digits, mnist, fashionmnist, cifar10
    "epochs": 10,
    "inherited_epochs": 0,  # epochs a child trains on from its parent's weights (0: epochs)
    "batch_size": 64,
    "patience": 5,  # epochs without a better validation loss before stopping
    "val_fraction": 0.2,  # of the training split, the same samples for the whole run
    "split_seed": 0,  # seed of the training/validation split
    "stage_dir": "",  # node-local directory to copy the data to first (once per node)
    "num_workers": 0,  # DataLoader worker processes
    "eval_batch_size": 512,
}


# -- the model ------------------------------------------------------------------------------

def build_model(conv_layers: int, activation: str, in_channels: int, height: int, width: int,
                classes: int) -> nn.Module:
    """Convolutions keep the image size (padding 1), so any image size and channel count fits."""
    if activation not in ACTIVATIONS:
        raise ObjectiveError(f"activation: expected one of {', '.join(ACTIVATIONS)}, "
                             f"got {activation!r}")
    if int(conv_layers) < 1:
        raise ObjectiveError(f"conv_layers: expected >= 1, got {conv_layers!r}")
    layers: list[nn.Module] = []
    for i in range(int(conv_layers)):
        layers += [nn.Conv2d(in_channels if i == 0 else CHANNELS, CHANNELS, 3, padding=1),
                   ACTIVATIONS[activation]()]
    layers += [nn.Flatten(), nn.Linear(CHANNELS * height * width, classes),
               nn.LogSoftmax(dim=1)]
    return nn.Sequential(*layers)


def build_model_from_params(params: Mapping[str, Any], input_shape: tuple[int, int, int],
                            classes: int) -> nn.Module:
    """The network an individual trained, ready for ``load_state_dict`` of its kept weights.

    ``input_shape`` is (channels, height, width), e.g. ``ImageSet.shape``.
    """
    channels, height, width = input_shape
    return build_model(_param(params, "conv_layers", int), _param(params, "activation", str),
                       channels, height, width, classes)


# -- metrics over the whole set -------------------------------------------------------------

def evaluate_whole_set(model: nn.Module, data: ImageSet, ctx: Context | None = None,
                       batch_size: int = 512) -> tuple[float, float]:
    """(mean NLL loss, accuracy) over all of ``data``, on every rank of ``ctx.comm``.

    Each rank evaluates the positions ``rank::size`` (disjoint, no padding duplicates); the
    float64 (loss sum, correct, count) of all ranks are then combined in rank order, so the
    result is bit-identical on every rank and equal (to rounding) to one process evaluating
    the whole set alone, which is what ``ctx=None`` does. Not a DDP collective: pass the plain
    module (``ddp.module``); batches go to the device of its parameters.
    """
    rank, size = (0, 1) if ctx is None else (ctx.rank, ctx.size)
    device = next(model.parameters()).device
    shard = data.subset(datasets.shard_positions(len(data), rank, size))
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    correct = torch.zeros((), dtype=torch.int64, device=device)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for start in range(0, len(shard), batch_size):
            x, y = shard[range(start, min(start + batch_size, len(shard)))]
            x, y = x.to(device), y.to(device)
            out = model(x)
            loss_sum += F.nll_loss(out, y, reduction="none").double().sum()
            correct += (out.argmax(dim=1) == y).sum()
    model.train(was_training)
    total = sum_over_worker([loss_sum.item(), float(correct.item()), float(len(shard))], ctx)
    return total[0] / total[2], total[1] / total[2]


def sum_over_worker(values: list[float], ctx: Context | None = None) -> list[float]:
    """Element-wise sums of float64 values over the worker's ranks, identical on every rank.

    An all-reduce whose result does not depend on the MPI library's reduction order: the
    per-rank values are gathered and added in rank order, so decisions taken from them (early
    stopping) agree on every rank.
    """
    mine = np.asarray(values, dtype=np.float64)
    if ctx is None or ctx.size == 1:
        return mine.tolist()
    rows = np.empty((ctx.size, len(mine)), dtype=np.float64)
    ctx.comm.Allgather(mine, rows)
    return [math.fsum(rows[:, j]) for j in range(rows.shape[1])]


# -- the objective --------------------------------------------------------------------------

def train(params: Mapping[str, Any], ctx: Context) -> float:
    """Train one individual on every rank of its worker; returns the best validation loss."""
    entered = time.perf_counter()
    opts = read_options(ctx.options)
    device = ctx.device  # first use makes the worker's process group (once per worker)
    full = datasets.load_for_worker(opts["dataset"], ctx.data_dir, "train", ctx.comm,
                                    opts["stage_dir"])
    training, validation = datasets.train_validation(full, opts["val_fraction"],
                                                     opts["split_seed"])
    seed = int(ctx.rng.integers(2**31 - 1))  # same on every rank: ctx.rng is per individual
    torch.manual_seed(seed)
    model = build_model_from_params(params, full.shape, full.classes).to(device)
    replica = _wrap(model, ctx, device)
    optimizer = torch.optim.Adadelta(replica.parameters(), lr=_param(params, "lr", float))
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1,
                                                gamma=_param(params, "gamma", float))
    loader, sampler = datasets.train_loader(training, opts["batch_size"], ctx.rank, ctx.size,
                                            seed, opts["num_workers"])
    progress = _start(ctx, model, optimizer, scheduler)
    # An inheriting child trains its own epochs on from its parent's epoch.
    first, epochs = 0, opts["epochs"]
    if ctx.inherited is not None:
        first, epochs = ctx.inherited.epoch + 1, opts["inherited_epochs"] or epochs
    ctx.last_epoch = first + epochs - 1  # a job stop met there leaves it finished
    setup_seconds = time.perf_counter() - entered  # parameters in hand -> first training step
    for epoch in range(progress["epoch"] + 1, first + epochs):
        if progress["stale"] >= opts["patience"]:
            break
        started = time.perf_counter()
        sampler.set_epoch(epoch)
        lr = float(scheduler.get_last_lr()[0])
        train_sum, seen = train_epoch(replica, loader, optimizer, device)
        scheduler.step()
        train_seconds = time.perf_counter() - started
        val_loss, val_acc = evaluate_whole_set(model, validation, ctx, opts["eval_batch_size"])
        train_sum, seen = sum_over_worker([train_sum, seen], ctx)
        if val_loss < progress["best_loss"]:
            progress.update(best_loss=val_loss, best_state=_plain_state(model), stale=0)
        else:
            progress["stale"] += 1
        progress["epoch"] = epoch
        stop = ctx.report(epoch, train_loss=train_sum / seen, val_loss=val_loss,
                          val_accuracy=val_acc, lr=lr,
                          epoch_seconds=time.perf_counter() - started,
                          samples_per_second=seen / train_seconds, setup_seconds=setup_seconds)
        ctx.save_checkpoint({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                             "scheduler": scheduler.state_dict(), "progress": progress}, epoch)
        if stop:
            break
    best_loss, best_state = progress["best_loss"], progress["best_state"]
    if math.isfinite(best_loss):
        ctx.keep_weights(best_state, best_loss)
    return best_loss


train.main_metric = "val_accuracy"  # type: ignore[attr-defined]  # what views show beside loss


def score_kept(run_dir: Path | str, split: str = "test") -> dict[str, Any]:
    """The run's best individual rebuilt from its kept weights and scored on ``split`` (the
    data set's held-out test split by default): its id, parameters, loss and accuracy. Reads
    the run's files and the data; no MPI."""
    import atoll
    from atoll.record import open_run
    from atoll.record.models import load_params, load_state_dict

    best = atoll.best(run_dir)
    if best.weights is None:
        raise ObjectiveError(f"{run_dir}: the best individual ({best.id}) has no kept weights; "
                             "set record.top_models >= 1")
    objective = open_run(run_dir).config_table.get("objective", {})
    opts = read_options(objective.get("options", {}))
    data = datasets.load_split(opts["dataset"], objective.get("data_dir") or None, split)
    params = load_params(best.weights) or best.params
    model = build_model_from_params(params, data.shape, data.classes)
    model.load_state_dict(load_state_dict(best.weights))
    loss, accuracy = evaluate_whole_set(model, data, batch_size=opts["eval_batch_size"])
    return {"id": best.id, "params": params, "loss": loss, "accuracy": accuracy,
            "split": split}


def preflight(options: Mapping[str, Any], data_dir: Path | str | None = None,
              parameters: Collection[str] | None = None) -> None:
    """The checks that need neither MPI nor training: options, data files, parameter names.

    For a search to run once before its job begins, so that bad input stops it with one line
    instead of failing every individual. Reachable as ``train.preflight``.
    """
    opts = read_options(options)
    if datasets.from_files(opts["dataset"]):
        datasets.check_files(opts["dataset"], datasets.require_root(opts["dataset"], data_dir))
    if parameters is not None:
        missing = [name for name in PARAMETERS if name not in parameters]
        if missing:
            raise ObjectiveError(f"space: the classifier needs the parameters "
                                 f"{', '.join(PARAMETERS)}; missing {', '.join(missing)}")


train.preflight = preflight  # type: ignore[attr-defined]


def _start(ctx: Context, model: nn.Module, optimizer: torch.optim.Optimizer,
           scheduler: Any) -> dict[str, Any]:
    """Where training starts: this individual's own checkpoint (an interrupted evaluation
    continued), the checkpoint it inherits (the parent's weights and optimizer state, with its
    own learning rate, schedule and early stopping), or from scratch."""
    progress: dict[str, Any] = {"epoch": -1, "best_loss": math.inf,
                                "best_state": _plain_state(model), "stale": 0,
                                "individual": ctx.individual_id}
    saved = ctx.load_checkpoint()  # collective: the same answer on every rank
    if saved is None:
        return progress
    if saved.state["progress"].get("individual", ctx.individual_id) == ctx.individual_id:
        model.load_state_dict(saved.state["model"])
        optimizer.load_state_dict(saved.state["optimizer"])
        scheduler.load_state_dict(saved.state["scheduler"])
        return dict(saved.state["progress"])
    differs = _shape_mismatch(model, saved.state["model"])
    if differs:
        ctx.decline_inherited(f"the model's shapes differ: {differs}")
        return progress
    model.load_state_dict(saved.state["model"])
    own = [(g["lr"], g.get("initial_lr", g["lr"])) for g in optimizer.param_groups]
    optimizer.load_state_dict(saved.state["optimizer"])
    for group, (lr, initial) in zip(optimizer.param_groups, own, strict=True):
        group["lr"], group["initial_lr"] = lr, initial
    return {**progress, "epoch": saved.epoch, "best_state": _plain_state(model)}


def _shape_mismatch(model: nn.Module, state: Mapping[str, Any]) -> str:
    """The first tensor of ``model`` that ``state`` lacks or holds in another shape ('': fits)."""
    own = model.state_dict()
    for name in sorted(set(own) | set(state)):
        if name not in own or name not in state:
            return f"{name} is in only one of them"
        if tuple(own[name].shape) != tuple(state[name].shape):
            return f"{name} is {tuple(state[name].shape)}, not {tuple(own[name].shape)}"
    return ""


def train_epoch(replica: nn.Module, loader: Any, optimizer: torch.optim.Optimizer,
                device: Any) -> tuple[float, float]:
    """One pass over this rank's shard: (loss sum, samples), both local to this rank. Public:
    the Ray peer in benchmarks/ trains with this very step."""
    replica.train()
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    seen = 0
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        loss = F.nll_loss(replica(x), y)
        loss.backward()
        optimizer.step()
        loss_sum += loss.detach().double() * len(y)
        seen += len(y)
    return loss_sum.item(), float(seen)


def _wrap(model: nn.Module, ctx: Context, device: Any) -> nn.Module:
    """DDP over the worker's process group; a one-rank worker trains the plain model."""
    if ctx.size == 1:
        return model
    from torch.nn.parallel import DistributedDataParallel

    ids = [device] if getattr(device, "type", "cpu") == "cuda" else None
    # Every rank seeded torch from the same ctx.rng before building the model, so the replicas
    # start equal: DDP's initial shape check and broadcast (two collectives) are skipped.
    return DistributedDataParallel(model, device_ids=ids, process_group=ctx.process_group,
                                   init_sync=False)


def _plain_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """A CPU copy of the plain module's weights (no DDP ``module.`` prefix)."""
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


def read_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """:data:`OPTIONS` with the given values, checked; unknown keys are refused."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ObjectiveError(f"objective.options.{unknown[0]}: unknown option of the "
                             f"classifier (known: {', '.join(OPTIONS)})")
    merged = {**OPTIONS, **options}
    for key, default in OPTIONS.items():
        value = merged[key]
        if isinstance(default, int) and (isinstance(value, bool) or not isinstance(value, int)):
            raise ObjectiveError(f"objective.options.{key}: expected an integer, got {value!r}")
        if isinstance(default, float) and not isinstance(value, int | float):
            raise ObjectiveError(f"objective.options.{key}: expected a number, got {value!r}")
        if isinstance(default, str) and not isinstance(value, str):
            raise ObjectiveError(f"objective.options.{key}: expected a string, got {value!r}")
    for key in ("epochs", "batch_size", "patience", "eval_batch_size"):
        if merged[key] < 1:
            raise ObjectiveError(f"objective.options.{key}: expected >= 1, got {merged[key]}")
    for key in ("num_workers", "inherited_epochs"):
        if merged[key] < 0:
            raise ObjectiveError(f"objective.options.{key}: expected >= 0, got {merged[key]}")
    datasets.check_name(merged["dataset"])
    return merged


def _param(params: Mapping[str, Any], name: str, kind: type) -> Any:
    if name not in params:
        raise ObjectiveError(f"parameter {name!r} missing: the classifier's search space needs "
                             f"{', '.join(PARAMETERS)}")
    try:
        return kind(params[name])
    except (TypeError, ValueError):
        raise ObjectiveError(f"parameter {name!r}: expected {kind.__name__}, "
                             f"got {params[name]!r}") from None
