"""Argument checks shared by the MAP and cost modules."""

import math
import numbers
from typing import Any


def is_finite_number(value: Any) -> bool:
    """A real number (not a bool), neither infinite nor NaN."""
    return (
        isinstance(value, numbers.Real)
        and not isinstance(value, bool)
        and math.isfinite(value)
    )


def as_int(value: Any, name: str) -> int:
    """Accept ints and integral floats (8.0); reject bools and fractions."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if is_finite_number(value) and float(value).is_integer():
        return int(value)
    raise ValueError(f'{name} must be an integer, got {value!r}')


#: Deeper than any ViT in use (DINOv2-g has 40 blocks); the split search
#: enumerates up to (depth + 1)^2 candidates.
MAX_DEPTH = 1024


def check_depth(depth: Any) -> int:
    """A network depth: a positive number of blocks, at most MAX_DEPTH."""
    depth = as_int(depth, 'depth')
    if not 1 <= depth <= MAX_DEPTH:
        raise ValueError(f'depth must be 1..{MAX_DEPTH}, got {depth}')
    return depth
