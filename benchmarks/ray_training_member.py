"""One Ray Train trial of the training rows (ray_training_side.py), on each of its ranks.

It trains the built-in classifier's network (atoll.objectives.classifier, imported from app/
with its data module; spirals.py registers its data set) on the same training and validation
split, batch size and rank shards as Atoll's workers, with DDP over the trial's CPU workers
(Ray Train's gloo process group), and reports the validation accuracy (on the whole
validation set, as Atoll's) after every epoch with its wall time. A module of its own, not
the side script: Ray pickles a function of ``__main__`` by value, and torch's modules do not
pickle; from here it is imported by name.

Checkpoints (PBT) hold the weights and the optimizer's state as tensors in a ``.npz`` (nothing
pickled). A trial that continues its own checkpoint keeps its learning-rate schedule; one that
exploited another's (new ``lr`` or ``gamma``) starts its own schedule from its ``lr`` on the
copied weights and optimizer state, as an Atoll child that inherits does.
"""

from __future__ import annotations

import importlib
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from ray import train
from ray.train import Checkpoint
from ray.train.torch import prepare_model

from atoll.objectives import classifier
from atoll.objectives import data as datasets

STATE = "state.npz"


def member(config: dict[str, Any]) -> None:
    """One trial, on each of its ranks: train on, report every epoch."""
    importlib.import_module("spirals")  # registers the spirals data set in this process
    context = train.get_context()
    rank, size = context.get_world_rank(), context.get_world_size()
    full = datasets.load_split(config["dataset"], None, "train")
    training, validation = datasets.train_validation(full, config["val_fraction"])
    torch.manual_seed(config["seed"])
    model = classifier.build_model_from_params(config, full.shape, full.classes)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=config["lr"])
    first = restore(model, optimizer, config)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=config["gamma"])
    replica = prepare_model(model)  # DDP over the trial's ranks
    loader, sampler = datasets.train_loader(training, config["batch_size"], rank, size,
                                            config["seed"])
    for epoch in range(first, config["epochs"]):
        sampler.set_epoch(epoch)
        classifier.train_epoch(replica, loader, optimizer, torch.device("cpu"))
        scheduler.step()
        loss, accuracy = classifier.evaluate_whole_set(model, validation)
        metrics = {"val_accuracy": accuracy, "val_loss": loss, "epoch": epoch + 1,
                   "ranks": size, "time": time.time()}
        with saved(model, optimizer, config, epoch + 1, rank) as checkpoint:
            train.report(metrics, checkpoint=checkpoint)


@contextmanager
def saved(model: torch.nn.Module, optimizer: torch.optim.Optimizer, config: dict[str, Any],
          epoch: int, rank: int) -> Iterator[Checkpoint | None]:
    """Rank 0's checkpoint for PBT (tensors in a .npz); None for ASHA and the other ranks."""
    if not config["checkpoints"] or rank != 0:
        yield None
        return
    arrays = {f"model:{k}": v.detach().cpu().numpy() for k, v in model.state_dict().items()}
    for index, state in optimizer.state_dict()["state"].items():
        for name, value in state.items():
            arrays[f"optimizer:{index}:{name}"] = torch.as_tensor(value).cpu().numpy()
    arrays["meta"] = np.array([epoch, optimizer.param_groups[0]["lr"], config["lr"],
                               config["gamma"]])
    with tempfile.TemporaryDirectory(prefix="ray-member-") as folder:
        np.savez(Path(folder) / STATE, **arrays)
        yield Checkpoint.from_directory(folder)


def restore(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
            config: dict[str, Any]) -> int:
    """The epoch to train from: 0, or the trial's checkpoint's (its own or the one PBT copied);
    sets the optimizer's learning rate (continued, or the trial's own after an exploit)."""
    checkpoint = train.get_checkpoint()
    if checkpoint is None:
        return 0
    with checkpoint.as_directory() as folder, \
            np.load(Path(folder) / STATE, allow_pickle=False) as stored:
        arrays = {key: torch.from_numpy(stored[key]) for key in stored.files}
    epoch, lr_now, lr, gamma = arrays.pop("meta").tolist()
    model.load_state_dict({k.removeprefix("model:"): v for k, v in arrays.items()
                           if k.startswith("model:")})
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in arrays.items():
        if key.startswith("optimizer:"):
            _, index, name = key.split(":")
            state.setdefault(int(index), {})[name] = value
    optimizer.load_state_dict({"state": state,
                               "param_groups": optimizer.state_dict()["param_groups"]})
    own = (lr, gamma) == (config["lr"], config["gamma"])
    for group in optimizer.param_groups:
        group["lr"] = lr_now if own else config["lr"]
    return int(epoch)
