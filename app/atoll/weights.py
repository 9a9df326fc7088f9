"""Model weights as HDF5, without pickle: one dataset per tensor, readable with h5py alone.

A state dict ``{name: tensor}`` becomes one dataset per entry, named by its key (a ``/`` in a
key makes groups, and reads back as the same key). Dtypes are kept; those numpy has no type
for (bfloat16, the float8 kinds) are stored as their raw bits in an unsigned integer of the same
width, with the torch dtype in the dataset's ``torch_dtype`` attribute (every dataset has it).
A file is written to a temporary name and renamed into place, so it is complete whenever it
exists. Importing this module does not import torch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import h5py
import numpy as np

if TYPE_CHECKING:
    import torch

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
        arrays[key] = (_to_numpy(tensor), str(tensor.dtype).removeprefix("torch."))
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with h5py.File(tmp, "w", track_order=True) as f:
            f.attrs["format"] = FORMAT
            f.attrs["format_version"] = FORMAT_VERSION
            for name, value in (attrs or {}).items():
                f.attrs[name] = value
            for key, (array, dtype) in arrays.items():
                parent, _, leaf = key.rpartition("/")
                group = f.require_group(parent) if parent else f
                ds = group.create_dataset(leaf, data=array)
                ds.attrs["torch_dtype"] = dtype
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
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
        return {k: _plain(v) for k, v in f.attrs.items() if k not in ("format",
                                                                       "format_version")}


def _collect(group: h5py.Group, prefix: str, into: dict[str, torch.Tensor]) -> None:
    """Datasets below ``group`` in the order they were written, keyed by their path."""
    import torch

    for name, node in group.items():
        if isinstance(node, h5py.Group):
            _collect(node, f"{prefix}{name}/", into)
            continue
        tensor = torch.from_numpy(np.array(node[()]))
        dtype = getattr(torch, str(node.attrs.get("torch_dtype", "")), None)
        if isinstance(dtype, torch.dtype) and dtype != tensor.dtype:
            tensor = tensor.view(dtype)
        into[prefix + name] = tensor


def _to_numpy(tensor: torch.Tensor) -> np.ndarray:
    import torch

    plain = tensor.detach().to("cpu").contiguous()
    try:
        return plain.numpy().copy(order="C")
    except TypeError:  # bfloat16, float8...: numpy has no such type, keep the bits
        width = plain.element_size()
        signed = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[width]
        return plain.view(signed).numpy().view(_RAW_BITS[width]).copy(order="C")


def _check_format(f: h5py.File, path: Path | str) -> None:
    if f.attrs.get("format") != FORMAT:
        raise ValueError(f"{path}: not an Atoll weights file (no format={FORMAT!r} attribute)")
    if int(f.attrs.get("format_version", 0)) > FORMAT_VERSION:
        raise ValueError(f"{path}: weights format {int(f.attrs['format_version'])} is newer "
                         f"than this Atoll reads ({FORMAT_VERSION})")


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.generic):
        return value.item()
    return value
