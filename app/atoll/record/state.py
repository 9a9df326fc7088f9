"""A training state as an HDF5 tree, without pickle: what a checkpoint holds.

A state is what DDP users keep to continue training: nested dicts (``str`` or ``int`` keys, as
torch optimizer state dicts have), lists, tuples, tensors (any dtype, any device), numpy arrays
and scalars, ``int`` (any size), ``float``, ``bool``, ``str``, ``bytes`` and ``None``. It reads
back with the same types, keys and bits (NaN payloads, ``-0.0``, 128-bit integers): torch, numpy
and Python RNG states and the state dicts of models, optimizers, LR schedulers and GradScalers
all fit. Mappings read back as ``dict`` (a module's ``OrderedDict`` too).

Every value is one HDF5 object whose ``type`` attribute says what it was: containers are
groups with children ``0 .. n-1`` in order (a dict's key and its type are attributes of the
child), tensors and arrays are datasets (tensors of dtypes numpy lacks, such as bfloat16, as
their raw bits in an unsigned integer of the same width, with the torch dtype in
``torch_dtype``), a list or tuple of plain ints in int64 range is one int64 dataset (Python's
RNG state is 625 of them). Text attributes are fixed-length UTF-8 (:func:`put_attr`), so a
checkpoint has no global heap; states written with variable-length ones still read. Importing
this module does not import torch.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import h5py
import numpy as np

from atoll.record._h5 import text
from atoll.record.models import tensor_from_numpy, tensor_to_numpy
from atoll.record.schema import put_attr

if TYPE_CHECKING:
    import torch

TYPE = "type"
_INT64 = np.iinfo(np.int64)
_READERS: dict[str, Callable[[Any], Any]] = {
    "bool": bool, "float": float, "int": lambda d: int(bytes(d).decode()),
    "str": lambda d: bytes(d).decode("utf-8", "surrogatepass"), "bytes": bytes,
    "ndarray": np.asarray, "numpy": lambda d: d}
"""Scalar datasets by their stored type (tensors and int sequences are read apart)."""


def write_state(group: h5py.Group, name: str, value: Any) -> None:
    """Store ``value`` as ``group[name]``; TypeError names the first part that cannot be."""
    _write(group, name, value, "state")


def read_state(node: h5py.Group | h5py.Dataset, map_location: Any = None) -> Any:
    """The value :func:`write_state` stored at ``node``; tensors on the CPU or on
    ``map_location`` (a device or its name)."""
    return _read(node, map_location)


def _write(group: h5py.Group, name: str, value: Any, where: str) -> None:
    kind = type(value)
    if value is None:
        put_attr(group.create_group(name), TYPE, "none")
    elif kind is bool:
        _scalar(group, name, np.bool_(value), "bool")
    elif kind is int:  # decimal text: any size, read back exactly
        _scalar(group, name, np.frombuffer(str(value).encode(), np.uint8), "int")
    elif kind is float:
        _scalar(group, name, np.float64(value), "float")
    elif kind is str:
        _scalar(group, name, np.frombuffer(value.encode("utf-8", "surrogatepass"), np.uint8),
                "str")
    elif kind is bytes:
        _scalar(group, name, np.frombuffer(value, np.uint8), "bytes")
    elif isinstance(value, np.ndarray | np.generic):
        if value.dtype.hasobject:
            raise TypeError(f"{where}: a numpy array of Python objects cannot be stored")
        _scalar(group, name, value, "ndarray" if isinstance(value, np.ndarray) else "numpy")
    elif kind in (list, tuple):
        _write_sequence(group, name, value, where)
    elif isinstance(value, Mapping):
        _write_mapping(group, name, value, where)
    elif _is_tensor(value):
        _write_tensor(group, name, value, where)
    else:
        raise TypeError(f"{where}: cannot store a {kind.__name__} in a checkpoint (store "
                        "tensors, arrays, numbers, strings, bytes, None, lists, tuples, dicts)")


def _scalar(group: h5py.Group, name: str, data: np.ndarray | np.generic, kind: str) -> None:
    put_attr(group.create_dataset(name, data=data), TYPE, kind)


def _write_sequence(group: h5py.Group, name: str, value: list[Any] | tuple[Any, ...],
                    where: str) -> None:
    kind = type(value).__name__
    if value and all(type(v) is int and _INT64.min <= v <= _INT64.max for v in value):
        _scalar(group, name, np.array(value, dtype=np.int64), f"{kind}-of-int")
        return
    sub = group.create_group(name)
    put_attr(sub, TYPE, kind)
    for i, item in enumerate(value):
        _write(sub, str(i), item, f"{where}[{i}]")


def _write_mapping(group: h5py.Group, name: str, value: Mapping[Any, Any], where: str) -> None:
    sub = group.create_group(name)
    put_attr(sub, TYPE, "dict")
    for i, (key, item) in enumerate(value.items()):
        if type(key) not in (str, int):
            raise TypeError(f"{where}: key {key!r} is a {type(key).__name__}; checkpoint keys "
                            "are str or int")
        if "\0" in str(key):
            raise TypeError(f"{where}: key {key!r} holds a NUL character; checkpoint keys "
                            "cannot")
        _write(sub, str(i), item, f"{where}[{key!r}]")
        put_attr(sub[str(i)], "key", str(key))
        put_attr(sub[str(i)], "key_type", type(key).__name__)


def _is_tensor(value: Any) -> bool:
    torch = _torch_if_loaded()
    return torch is not None and isinstance(value, torch.Tensor)


def _torch_if_loaded() -> Any:
    """torch, if the objective imported it (a state without tensors needs no torch)."""
    return sys.modules.get("torch")


def _write_tensor(group: h5py.Group, name: str, tensor: torch.Tensor, where: str) -> None:
    if tensor.layout != _torch_if_loaded().strided or tensor.is_quantized:
        raise TypeError(f"{where}: a {tensor.layout} tensor cannot be stored; store a dense one")
    ds = group.create_dataset(name, data=tensor_to_numpy(tensor))
    put_attr(ds, TYPE, "tensor")
    put_attr(ds, "torch_dtype", str(tensor.dtype).removeprefix("torch."))
    ds.attrs["requires_grad"] = bool(tensor.requires_grad)


def _read(node: h5py.Group | h5py.Dataset, map_location: Any) -> Any:
    kind = text(node.attrs.get(TYPE, ""))
    if isinstance(node, h5py.Group):
        return _read_group(node, kind, map_location)
    data = node[()]
    if kind == "tensor":
        tensor = tensor_from_numpy(np.asarray(data), text(node.attrs["torch_dtype"]))
        if map_location is not None:
            tensor = tensor.to(map_location)
        return tensor.requires_grad_(bool(node.attrs.get("requires_grad", False)))
    if kind in ("list-of-int", "tuple-of-int"):
        items = [int(v) for v in data]
        return items if kind == "list-of-int" else tuple(items)
    if kind not in _READERS:
        raise ValueError(f"{node.name}: unknown stored type {kind!r}")
    return _READERS[kind](data)


def _read_group(group: h5py.Group, kind: str, map_location: Any) -> Any:
    if kind == "none":
        return None
    children = [group[str(i)] for i in range(len(group))]
    if kind == "list":
        return [_read(c, map_location) for c in children]
    if kind == "tuple":
        return tuple(_read(c, map_location) for c in children)
    if kind == "dict":
        return {_key(c): _read(c, map_location) for c in children}
    raise ValueError(f"{group.name}: unknown stored type {kind!r}")


def _key(node: h5py.Group | h5py.Dataset) -> str | int:
    key = text(node.attrs["key"])
    return int(key) if text(node.attrs["key_type"]) == "int" else key
