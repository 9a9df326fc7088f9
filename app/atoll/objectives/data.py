"""Image data sets for the built-in classifier: in memory, normalised, prepared once per node.

A data set is read once per process and kept (module-level cache keyed by (dataset, root,
split)), so the individuals after the first one neither re-read nor re-decode anything. Subsets
(the training and validation parts, a rank's shard) are views: row indices into the cached
tensors, never copies.

- ``digits``: scikit-learn's 8x8 digits, shipped with scikit-learn (no directory, no network).
  It has no test split of its own: a fixed 20% (seed 0) is held out as ``test``.
- ``mnist``, ``fashionmnist``, ``cifar10``: torchvision's readers on ``objective.data_dir``,
  never downloading. Note that torchvision reads CIFAR-10's python batches with ``pickle``:
  use CIFAR-10 files from a source you trust.

Under a worker, the node-local rank 0 of the worker prepares the data (optionally copies the
files to node-local storage, ``stage_dir``, and checks them) while the worker's other ranks on
that node wait; any rank's failure becomes the same :class:`ObjectiveError` on every rank.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch.utils.data import Dataset

from atoll.collective import on_all, on_root
from atoll.errors import ObjectiveError

if TYPE_CHECKING:
    from mpi4py import MPI

SPLITS = ("train", "test")


@dataclass(frozen=True)
class ImageSet(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Images (N, C, H, W) float32, normalised, and labels (N,) int64; ``rows`` makes a view.

    Indexing takes a sequence of positions and returns one batch ``(images, labels)``, so a
    ``DataLoader`` with ``batch_size=None`` over a ``BatchSampler`` gathers whole batches with
    one tensor index instead of collating single samples.
    """

    images: torch.Tensor
    labels: torch.Tensor
    classes: int
    rows: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.labels) if self.rows is None else len(self.rows)

    def __getitem__(self, positions: Sequence[int] | torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        index = torch.as_tensor(positions, dtype=torch.long)
        if self.rows is not None:
            index = self.rows[index]
        return self.images[index], self.labels[index]

    @property
    def shape(self) -> tuple[int, int, int]:
        """(channels, height, width) of one image."""
        _, c, h, w = self.images.shape
        return int(c), int(h), int(w)

    def subset(self, positions: Sequence[int] | np.ndarray | torch.Tensor) -> ImageSet:
        """A view of some of this set's samples (positions relative to this set)."""
        index = torch.as_tensor(np.asarray(positions), dtype=torch.long)
        rows = index if self.rows is None else self.rows[index]
        return ImageSet(self.images, self.labels, self.classes, rows)


@dataclass(frozen=True)
class DatasetSpec:
    """Where a torchvision data set's files are under its root, and how to normalise it."""

    torchvision_class: str
    files: tuple[str, ...]  # relative to the root; torchvision wants all, whatever the split
    mean: tuple[float, ...]
    std: tuple[float, ...]


def _idx_files(folder: str) -> tuple[str, ...]:
    return tuple(f"{folder}/raw/{prefix}-{kind}-ubyte" for prefix in ("train", "t10k")
                 for kind in ("images-idx3", "labels-idx1"))


_CIFAR = "cifar-10-batches-py"
TORCHVISION: dict[str, DatasetSpec] = {
    "mnist": DatasetSpec("MNIST", _idx_files("MNIST"), (0.1307,), (0.3081,)),
    "fashionmnist": DatasetSpec("FashionMNIST", _idx_files("FashionMNIST"), (0.2860,), (0.3530,)),
    "cifar10": DatasetSpec(
        "CIFAR10",
        (*(f"{_CIFAR}/data_batch_{i}" for i in range(1, 6)), f"{_CIFAR}/test_batch",
         f"{_CIFAR}/batches.meta"),
        (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
}
DATASETS = ("digits", *TORCHVISION)
DIGITS_MEAN, DIGITS_STD = 0.3053, 0.3760  # of load_digits().data / 16
DIGITS_TEST_FRACTION = 0.2

_CACHE: dict[tuple[str, str, str], ImageSet] = {}
_BUILT: dict[str, Callable[[str], ImageSet]] = {}
"""Data sets made in memory (:func:`register`), by name."""


def register(name: str, build: Callable[[str], ImageSet]) -> None:
    """Let the classifier train on a data set of one's own, made in memory:
    ``objective.options.dataset = name``, and ``build(split)`` makes each split ("train",
    "test") when a process first needs it, the same in every process (nothing is read from
    files or staged). Every rank must register it: do it when the objective's module is
    imported (``benchmarks/spirals.py`` does)."""
    if name in DATASETS:
        raise ValueError(f"data set {name!r}: the name is one of Atoll's own "
                         f"({', '.join(DATASETS)})")
    _BUILT[name] = build


def from_files(dataset: str) -> bool:
    """Whether the data set is read from files under ``objective.data_dir``."""
    return dataset in TORCHVISION


# -- reading -------------------------------------------------------------------------------

def load_split(dataset: str, root: Path | str | None, split: str) -> ImageSet:
    """One split of a data set, from the process's cache or read now (no MPI involved)."""
    key = (dataset, str(root or ""), split)
    if key not in _CACHE:
        _CACHE[key] = _read(dataset, Path(root) if root else None, split)
    return _CACHE[key]


def load_for_worker(dataset: str, root: Path | str | None, split: str, comm: MPI.Comm,
                    stage_dir: Path | str = "") -> ImageSet:
    """:func:`load_split` for a worker: prepared once per node, the same outcome on every rank.

    Collective over ``comm`` unless the split is cached already (it then is on every rank of
    the worker, since they evaluate the same individuals).
    """
    key = (dataset, str(root or ""), split)
    if key in _CACHE:
        return _CACHE[key]
    check_name(dataset)
    if not from_files(dataset):
        data = on_all(comm, lambda: _read(dataset, None, split), ObjectiveError)
    else:
        source = require_root(dataset, root)
        where = prepare_on_node(comm, dataset, source, stage_dir)
        data = on_all(comm, lambda: _read(dataset, where, split), ObjectiveError)
    _CACHE[key] = data
    return data


def check_name(dataset: str) -> None:
    known = (*DATASETS, *_BUILT)
    if dataset not in known:
        raise ObjectiveError(f"objective.options.dataset: expected one of {', '.join(known)}, "
                             f"got {dataset!r}")


def require_root(dataset: str, root: Path | str | None) -> Path:
    if not root:
        raise ObjectiveError(f"objective.data_dir: not set, and dataset {dataset!r} is read from "
                             f"a directory; {_how_to_stage(dataset, '<dir>')}")
    return Path(root)


def check_files(dataset: str, root: Path) -> None:
    """Raise a one-line ObjectiveError naming the first missing file and how to get it."""
    spec = TORCHVISION[dataset]
    if not root.is_dir():
        raise ObjectiveError(f"{dataset}: data directory {root} does not exist; "
                             f"{_how_to_stage(dataset, root)}")
    for name in spec.files:
        if not (root / name).is_file():
            raise ObjectiveError(f"{dataset}: missing {root / name}; "
                                 f"{_how_to_stage(dataset, root)}")


def _how_to_stage(dataset: str, root: Path | str) -> str:
    cls = TORCHVISION[dataset].torchvision_class
    return (f"download it on a login node with torchvision.datasets.{cls}('{root}', "
            "download=True) (Atoll never downloads)")


def _read(dataset: str, root: Path | None, split: str) -> ImageSet:
    if split not in SPLITS:
        raise ObjectiveError(f"split: expected one of {', '.join(SPLITS)}, got {split!r}")
    check_name(dataset)
    if dataset == "digits":
        return _read_digits(split)
    if dataset in _BUILT:
        return _BUILT[dataset](split)
    root = require_root(dataset, root)
    check_files(dataset, root)
    import torchvision.datasets as tvd

    spec = TORCHVISION[dataset]
    try:
        raw = getattr(tvd, spec.torchvision_class)(str(root), train=split == "train",
                                                   download=False)
    except Exception as exc:  # noqa: BLE001 - a damaged file is bad input: one clear line
        first = (str(exc).splitlines() or [""])[0]
        raise ObjectiveError(f"{dataset}: cannot read {split} split under {root} "
                             f"({type(exc).__name__}: {first}); "
                             f"{_how_to_stage(dataset, root)}") from None
    pixels = torch.as_tensor(np.asarray(raw.data))
    images = pixels.unsqueeze(1) if pixels.ndim == 3 else pixels.permute(0, 3, 1, 2)
    labels = torch.as_tensor(np.asarray(raw.targets), dtype=torch.long)
    return ImageSet(_normalise(images.float() / 255.0, spec.mean, spec.std), labels,
                    len(raw.classes))


def _read_digits(split: str) -> ImageSet:
    from sklearn.datasets import load_digits

    digits = load_digits()
    order = np.random.default_rng(0).permutation(len(digits.target))
    n_test = round(len(order) * DIGITS_TEST_FRACTION)
    rows = np.sort(order[:n_test] if split == "test" else order[n_test:])
    images = torch.as_tensor(digits.images[rows], dtype=torch.float32).unsqueeze(1) / 16.0
    labels = torch.as_tensor(digits.target[rows], dtype=torch.long)
    return ImageSet(_normalise(images, (DIGITS_MEAN,), (DIGITS_STD,)), labels,
                    len(digits.target_names))


def _normalise(images: torch.Tensor, mean: Sequence[float], std: Sequence[float]
               ) -> torch.Tensor:
    m = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)
    return ((images - m) / s).contiguous()


# -- splitting and sharding ----------------------------------------------------------------

def train_validation(data: ImageSet, val_fraction: float, seed: int = 0
                     ) -> tuple[ImageSet, ImageSet]:
    """A seeded split: the same for every rank and every individual of a run."""
    if not 0.0 < val_fraction < 1.0:
        raise ObjectiveError(f"objective.options.val_fraction: expected a number in (0, 1), "
                             f"got {val_fraction!r}")
    order = np.random.default_rng(seed).permutation(len(data))
    n_val = round(len(data) * val_fraction)
    if n_val < 1 or n_val >= len(data):
        raise ObjectiveError(f"objective.options.val_fraction: {val_fraction} of {len(data)} "
                             "samples leaves an empty training or validation set")
    return data.subset(np.sort(order[n_val:])), data.subset(np.sort(order[:n_val]))


def shard_positions(n: int, rank: int, size: int) -> np.ndarray:
    """Positions ``rank::size``: disjoint over ranks, covering ``range(n)`` exactly once."""
    return np.arange(rank, n, size)


def train_loader(data: ImageSet, batch_size: int, rank: int, size: int, seed: int,
                 num_workers: int = 0) -> tuple[Any, Any]:
    """(loader, sampler) for one rank's exclusive shard; call ``sampler.set_epoch`` each epoch.

    ``drop_last`` keeps the shards disjoint and equally long (DDP needs the same number of
    batches on every rank): each epoch leaves out at most ``size - 1`` samples, different ones
    each epoch, instead of repeating samples on some ranks.
    """
    from torch.utils.data import BatchSampler, DataLoader, DistributedSampler

    sampler: DistributedSampler[int] = DistributedSampler(
        data, num_replicas=size, rank=rank, shuffle=True, seed=seed, drop_last=size > 1)
    batches = BatchSampler(sampler, batch_size, drop_last=False)
    loader: DataLoader[Any] = DataLoader(data, sampler=batches, batch_size=None,
                                         num_workers=num_workers)
    return loader, sampler


# -- preparation once per node -------------------------------------------------------------

def prepare_on_node(comm: MPI.Comm, dataset: str, root: Path, stage_dir: Path | str = ""
                    ) -> Path:
    """Stage (optional) and check the files on the node-local rank 0; the others wait.

    Returns the root to read from (the staged copy if ``stage_dir`` is set). Collective over
    ``comm``: every rank of the worker gets the same answer or the same error.
    """
    from mpi4py import MPI

    node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    try:
        return on_all(comm, lambda: on_root(node, lambda: _check_staged(dataset, root, stage_dir),
                                            ObjectiveError), ObjectiveError)
    finally:
        node.Free()


def _check_staged(dataset: str, root: Path, stage_dir: Path | str) -> Path:
    where = stage(dataset, root, stage_dir) if stage_dir else root
    check_files(dataset, where)
    return where


def stage(dataset: str, root: Path, stage_dir: Path | str) -> Path:
    """Copy the data set's files under ``stage_dir`` once; returns the staged root.

    The copy is made in a temporary directory and renamed into place, so a staged root is
    complete whenever it exists, and two processes staging at once do not collide.
    """
    spec = TORCHVISION[dataset]
    digest = hashlib.sha1(str(root.resolve()).encode()).hexdigest()[:12]
    target = Path(stage_dir) / f"atoll-{dataset}-{digest}"
    if target.is_dir():
        return target
    check_files(dataset, root)
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        for name in spec.files:
            (scratch / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / name, scratch / name)
        os.rename(scratch, target)
    except OSError:
        if not target.is_dir():
            raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target
