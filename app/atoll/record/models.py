"""Model weights as HDF5, without pickle, and the bookkeeping of which are kept.

Each worker leader keeps the weights of its own best ``limit`` individuals (a superset of the
run's best ``limit``, :class:`TopWeights`); when a job ends, rank 0 removes every file outside
the run's top ``limit`` (:func:`prune_to_top`). Files are readable with h5py alone. A command
objective's weights are its script's own files: the checkpoint directory of a kept individual is
kept whole, as hard links (``RUN_DIR/models/ind000000000042/``).

A state dict ``{name: tensor}`` becomes one dataset per entry, named by its key (a ``/`` in a
key makes groups, and reads back as the same key). Dtypes are kept; those numpy has no type
for (bfloat16, the float8 kinds) are stored as their raw bits in an unsigned integer of the same
width, with the torch dtype in the dataset's ``torch_dtype`` attribute (every dataset has it).
Text attributes are fixed-length UTF-8 (:func:`put_attr`), so a file has no global heap (HDF5
checksums none; a damaged heap header could loop it); files written with variable-length
strings (Atoll before) still read.
A file is written to a temporary name and renamed into place, so it is complete whenever it
exists. Importing this module does not import torch.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import h5py
import numpy as np

from atoll.individual import Status
from atoll.record import full
from atoll.record._h5 import plain, text
from atoll.record.links import holds_files, link_tree
from atoll.record.paths import RunPaths
from atoll.record.schema import put_attr

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

FORMAT = "atoll-weights"
FORMAT_VERSION = 1
_RAW_BITS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def save_state_dict(path: Path | str, state_dict: Mapping[str, torch.Tensor],
                    attrs: Mapping[str, str | int | float] | None = None) -> Path:
    """Write ``state_dict`` (plain tensors, any device) to ``path`` atomically; returns it.

    ``attrs`` go to the file's root attributes (e.g. the individual id and its loss).
    """
    import torch

    path = Path(path)
    arrays: dict[str, tuple[np.ndarray, str]] = {}
    for key, tensor in state_dict.items():
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"state_dict[{key!r}]: expected a tensor, got {type(tensor).__name__}")
        if not key or key.startswith("/") or "//" in key or key.endswith("/"):
            raise ValueError(f"state_dict key {key!r} cannot name an HDF5 dataset")
        arrays[key] = (tensor_to_numpy(tensor), str(tensor.dtype).removeprefix("torch."))
    with full.built_in_memory(path, fsync=True, track_order=True) as f:
        put_attr(f, "format", FORMAT)
        f.attrs["format_version"] = FORMAT_VERSION
        for name, value in (attrs or {}).items():
            put_attr(f, name, value)
        for key, (array, dtype) in arrays.items():
            parent, _, leaf = key.rpartition("/")
            group = f.require_group(parent) if parent else f
            ds = group.create_dataset(leaf, data=array)
            put_attr(ds, "torch_dtype", dtype)
    return path


def load_state_dict(path: Path | str) -> dict[str, torch.Tensor]:
    """The tensors of a file written by :func:`save_state_dict`, on the CPU, keys in order."""
    tensors: dict[str, torch.Tensor] = {}
    with h5py.File(path, "r") as f:
        _check_format(f, path)
        _collect(f, "", tensors)
    return tensors


def load_attrs(path: Path | str) -> dict[str, Any]:
    """The ``attrs`` given to :func:`save_state_dict` (without the format markers)."""
    with h5py.File(path, "r") as f:
        _check_format(f, path)
        return {k: plain(v) for k, v in f.attrs.items() if k not in ("format",
                                                                       "format_version")}


def load_params(path: Path | str) -> dict[str, Any]:
    """The parameters of the individual whose weights ``path`` holds (empty if not stored)."""
    stored = load_attrs(path).get("params")
    return dict(json.loads(stored)) if isinstance(stored, str) else {}


def _collect(group: h5py.Group, prefix: str, into: dict[str, torch.Tensor]) -> None:
    """Datasets below ``group`` in the order they were written, keyed by their path."""
    for name, node in group.items():
        if isinstance(node, h5py.Group):
            _collect(node, f"{prefix}{name}/", into)
            continue
        into[prefix + name] = tensor_from_numpy(np.array(node[()]),
                                                text(node.attrs.get("torch_dtype", "")))


def tensor_to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A CPU array of the tensor's values (its raw bits where numpy lacks the dtype), to be
    written at once: it may share memory with the tensor."""
    import torch

    plain = tensor.detach().to("cpu").contiguous()
    try:
        return plain.numpy()
    except TypeError:  # bfloat16, float8...: numpy has no such type, keep the bits
        width = plain.element_size()
        signed = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[width]
        return plain.view(signed).numpy().view(_RAW_BITS[width])


def tensor_from_numpy(array: np.ndarray, torch_dtype: str) -> torch.Tensor:
    """The tensor :func:`tensor_to_numpy` gave ``array`` for (``torch_dtype``: e.g.
    ``"bfloat16"``), sharing its memory."""
    import torch

    tensor = torch.from_numpy(array)
    dtype = getattr(torch, torch_dtype, None)
    if isinstance(dtype, torch.dtype) and dtype != tensor.dtype:
        tensor = tensor.view(dtype)
    return tensor


def _check_format(f: h5py.File, path: Path | str) -> None:
    if text(f.attrs.get("format")) != FORMAT:
        raise ValueError(f"{path}: not an Atoll weights file (no format={FORMAT!r} attribute)")
    if int(f.attrs.get("format_version", 0)) > FORMAT_VERSION:
        raise ValueError(f"{path}: weights format {int(f.attrs['format_version'])} is newer "
                         f"than this Atoll reads ({FORMAT_VERSION})")


class TopWeights:
    """One leader's best ``limit`` weight files under ``RUN_DIR/models``.

    An objective may offer weights as often as it likes (the usual "save when the validation
    loss improves"): an individual's file holds its best offer, and one individual takes one
    place however often it offers. More than one leader may offer for one individual (paused
    by one worker and promoted by another, or continued by the next job): the file says what
    it holds, so no leader replaces it with worse weights or evicts what another one kept.
    """

    def __init__(self, paths: RunPaths, limit: int) -> None:
        self.paths = paths
        self.limit = limit
        self._kept: dict[int, float] = {}  # individual id -> loss of the weights in its file
        self._said_nan = False

    def offer(self, individual_id: int, loss: float, state_dict: Mapping[str, Any],
              params: Mapping[str, Any] | None = None) -> Path | None:
        """Store the weights if they rank among this leader's best and beat this individual's
        earlier offers; returns the file or None. The file carries the individual's id, loss
        and parameters (JSON in ``params``)."""
        if loss != loss and not self._said_nan:
            self._said_nan = True
            log.warning("individual %d: ctx.keep_weights got loss nan: weights offered with a "
                        "loss that is not a number are not kept (said once per worker)",
                        individual_id)
        if not self._ranks(individual_id, loss):
            return None
        path = self.paths.model_file(individual_id)
        with full.creating(path.parent):  # a full disk stops the job (save_state_dict too)
            path.parent.mkdir(parents=True, exist_ok=True)
        save_state_dict(path, state_dict, {"individual": individual_id, "loss": loss,
                                           "params": json.dumps(dict(params or {}),
                                                                default=str)})
        self._keep(individual_id, loss)
        return path

    def offer_directory(self, individual_id: int, loss: float, directory: Path) -> Path | None:
        """Keep a finished command's checkpoint directory (hard links to its files) if the
        individual ranks among this leader's best; returns the kept directory or None. Said in
        one line when the links cannot be made."""
        if not holds_files(directory) or not self._ranks(individual_id, loss):
            return None
        target = self.paths.model_dir(individual_id)
        with full.creating(target.parent):
            target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f"{target.name}.partial")  # never listed as kept
        problem = link_tree(directory, partial)
        if problem:
            log.warning("individual %d's weights are not kept: %s", individual_id, problem)
            return None
        discard(target)
        partial.rename(target)
        self._keep(individual_id, loss)
        return target

    def _ranks(self, individual_id: int, loss: float) -> bool:
        """Whether weights at ``loss`` would be kept: among this leader's best, and better than
        the individual's earlier offer."""
        if self.limit <= 0 or loss != loss:  # no keeping, or a NaN loss
            return False
        own = self._kept.get(individual_id)
        if own is not None:
            return loss < own
        stored = self._stored_loss(individual_id)
        if stored is not None and not loss < stored:
            return False
        return len(self._kept) < self.limit or loss < max(self._kept.values())

    def _keep(self, individual_id: int, loss: float) -> None:
        self._kept[individual_id] = loss
        if len(self._kept) > self.limit:  # a newcomer better than the worst: never itself
            worst = max(self._kept, key=self._kept.__getitem__)
            mine = self._kept.pop(worst)
            if self._stored_loss(worst) in (None, mine):  # not better weights another kept
                discard(self.paths.model_file(worst))
            discard(self.paths.model_dir(worst))

    def _stored_loss(self, individual_id: int) -> float | None:
        """The loss of the weights file kept for this individual, if one is there and says."""
        path = self.paths.model_file(individual_id)
        if not path.is_file():
            return None
        try:
            loss = float(load_attrs(path)["loss"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return loss if loss == loss else None


def discard(path: Path) -> None:
    """Delete kept weights: a file, or a command's directory."""
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def prune_to_top(paths: RunPaths, individuals: np.ndarray, limit: int) -> list[int]:
    """Delete weight files outside the run's best ``limit``; returns the ids kept.

    ``individuals`` is the run's table (id, status, loss). The best are the completed
    individuals with a finite loss, lowest first (the ones :func:`atoll.best` ranks); files of
    pruned, failed or interrupted individuals are kept only while places are left.
    """
    files = paths.model_files()
    rank = {int(i): (status != int(Status.OK) or not math.isfinite(loss),
                     loss if math.isfinite(loss) else math.inf)
            for i, loss, status in zip(individuals["id"].tolist(), individuals["loss"].tolist(),
                                       individuals["status"].tolist(), strict=True)}
    ranked = sorted((*rank.get(i, (True, math.inf)), i) for i in files)
    keep = [i for *_, i in ranked[:limit]]
    for ind_id, path in files.items():
        if ind_id not in keep:
            discard(path)
    for partial in paths.models_dir.glob("ind*.partial"):  # a job killed while linking
        discard(partial)
    return keep
