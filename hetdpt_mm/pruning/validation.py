"""Argument checks shared by the MAP and cost modules."""
import math
import numbers
from typing import Any


def as_int(value: Any, name: str) -> int:
    """Accept ints and integral floats (8.0); reject bools and fractions."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if (isinstance(value, numbers.Real) and not isinstance(value, bool)
            and math.isfinite(value) and float(value).is_integer()):
        return int(value)
    raise ValueError(f'{name} must be an integer, got {value!r}')


def check_depth(depth: Any) -> int:
    """A network depth: a positive number of blocks."""
    depth = as_int(depth, 'depth')
    if depth < 1:
        raise ValueError(f'depth must be a positive number of blocks, '
                         f'got {depth}')
    return depth


def positive_int(value: Any, name: str) -> int:
    """A count or length given in a config: an integer of at least 1."""
    if isinstance(value, bool) or not isinstance(
            value, numbers.Integral) or value < 1:
        raise ValueError(f'{name} must be a positive integer, got {value!r}')
    return int(value)
