"""TOML data made read-only for a Config (``objective.options``, a command's ``env``), and back."""

from __future__ import annotations

import datetime
from collections.abc import Iterator, Mapping
from typing import Any

from atoll.config.checks import show
from atoll.errors import ConfigError
from atoll.space import key_path


class FrozenMap(Mapping[str, Any]):
    """A read-only mapping that, unlike ``types.MappingProxyType``, can be pickled: a Config is
    planned once on rank 0 and broadcast to the other ranks as it is."""

    def __init__(self, items: Mapping[str, Any]) -> None:
        self._items = dict(items)

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    # The dict's own lookups: Mapping's mixins go through __getitem__ and an exception for a
    # missing key, and an objective reads its options on every evaluation.
    def get(self, key: str, default: Any = None) -> Any:
        return self._items.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __repr__(self) -> str:
        return repr(self._items)


_TOML_SCALARS = (str, int, float, bool, datetime.date, datetime.time)  # datetime is a date


def freeze(value: Any, key: str) -> Any:
    """A read-only deep copy of TOML data: tables become FrozenMaps, arrays tuples, dates and
    times ISO 8601 strings."""
    if isinstance(value, Mapping):
        return FrozenMap(
            {str(k): freeze(v, key_path(key, str(k))) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v, f"{key}[{i}]") for i, v in enumerate(value))
    if not isinstance(value, _TOML_SCALARS):
        raise ConfigError(f"{key}: {show(value)} is not a TOML value")
    if isinstance(value, (datetime.date, datetime.time)):
        # As ISO 8601 text: the run's record stores its config as JSON, which has no dates, and a
        # rerun or resume must see the very same options.
        return value.isoformat()
    return value


def thaw(value: Any) -> Any:
    """The plain dicts and lists :func:`freeze` came from."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


