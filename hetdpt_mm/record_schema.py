"""The bounds and the schema check of a HetDPT record's plain data
(docs/advanced/checkpoint_record.md)."""

import math
import numbers
from collections.abc import Mapping
from typing import Any

from .checkpoint import CheckpointError

#: The fields of a record; anything else in one is refused.
RECORD_FIELDS = frozenset(
    {
        'version',
        'family',
        'spec',
        'form',
        'arch',
        'semantics',
        'prefix',
        'teacher_prefix',
        'backbones',
    }
)
#: Bounds of what a record may hold (ours are a few hundred bytes, nested
#: up to six deep in a meta record listing several backbones): a hostile
#: file must not make a loader parse without limit.
MAX_RECORD_BYTES = 1 << 20
MAX_RECORD_NESTING = 8
MAX_RECORD_ITEMS = 1 << 16
MAX_RECORD_STRING = 256
MAX_RECORD_INT = 1 << 31
MAX_DEPTH = 1024


class RecordError(CheckpointError):
    """A HetDPT record that is corrupt or outside the record's schema."""


def check_plain(value: Any, where: str) -> None:
    """Raise :class:`RecordError` unless ``value`` is JSON-like data within
    the record's bounds (checked without recursion: nesting is one of the
    bounds)."""
    stack, items = [(value, 0, where)], 0
    while stack:
        value, depth, path = stack.pop()
        items += 1
        if depth > MAX_RECORD_NESTING or items > MAX_RECORD_ITEMS:
            what = (
                'nested deeper than'
                if depth > MAX_RECORD_NESTING
                else 'has more items than'
            )
            limit = (
                MAX_RECORD_NESTING
                if depth > MAX_RECORD_NESTING
                else MAX_RECORD_ITEMS
            )
            raise RecordError(
                f'{where}: the HetDPT record is {what} {limit} (at {path})'
            )
        if isinstance(value, Mapping):
            for key, item in value.items():
                if not isinstance(key, str) or len(key) > MAX_RECORD_STRING:
                    raise RecordError(
                        f'{where}: the HetDPT record has a key '
                        f'{str(key)[:40]!r} at {path}'
                    )
                stack.append((item, depth + 1, f'{path}.{key}'))
        elif isinstance(value, (list, tuple)):
            stack.extend(
                (item, depth + 1, f'{path}[{index}]')
                for index, item in enumerate(value)
            )
        elif isinstance(value, str):
            if len(value) > MAX_RECORD_STRING:
                raise RecordError(
                    f'{where}: {path} of the HetDPT record is '
                    f'a string of {len(value)} characters'
                )
        elif isinstance(value, bool) or value is None:
            pass
        elif isinstance(value, numbers.Integral):
            if abs(value) > MAX_RECORD_INT:
                raise RecordError(
                    f'{where}: {path} of the HetDPT record is '
                    f'an integer beyond +-{MAX_RECORD_INT}'
                )
        elif isinstance(value, numbers.Real):
            if not math.isfinite(value):
                raise RecordError(
                    f'{where}: {path} of the HetDPT record is {value}'
                )
        else:
            raise RecordError(
                f'{where}: {path} of the HetDPT record is a '
                f'{type(value).__name__}, not plain data'
            )
