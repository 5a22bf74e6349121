"""MAP over any number of layer types: windowed attention, global attention
and GELUs of a SAM / ViTDet encoder, or the paper's two (docs/user_guides/
sam_vitdet.md, *MAP with three layer types*).

A layer type is a name the network answers (``layer_types()`` of a
backbone: a spec kind over a set of blocks; ``'attn_window'`` and
``'attn_global'`` split the attention of the windowed ViTs).  A point gives
the removed count of each type and the accuracy; every type's retained ratio
is ``(depth - removed) / depth``, counted in blocks of the network as the
paper's ``a`` and ``t``, so a type with fewer layers spans a shorter range.

The polynomial's variables are the types some point removes: a type without
points stays out of the fit and keeps its count (0) in every split, so the
three-type fit of points that never remove global attention is the
two-type fit of their (windowed attention, GELU) counts, term for term.
Degree, leave-2-out CV and the budget search are the two-type ones
(:mod:`.fit`, :mod:`.allocation`) in more variables."""

import itertools
import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np
from scipy.spatial import ConvexHull

from ...fileio import check_input_file, read_json_file
from ..validation import as_int, check_depth, is_finite_number
from .allocation import Bounds, resolve_bounds
from .fit import (
    DegreeScore,
    fit_degrees,
    format_cv_table,
    format_polynomial,
    inside_hull,
    monomials,
    polynomial_terms,
    term_name,
)
from .points import (
    ACCURACY_COLUMNS,
    _as_number,
    _check_accuracy_units,
    _is_given,
    _normalise_key,
    _read_csv_records,
    _read_json_records,
)

#: A layer type: its spec kind and its blocks.
LayerType = Tuple[str, Sequence[int]]


@dataclass(frozen=True)
class TypePoint:
    """Removed layers per type (in the fit's type order) and the accuracy
    after fine-tuning."""

    counts: Tuple[int, ...]
    accuracy: float


def count_column(layer_type: str) -> str:
    return f'n_{layer_type}'


def load_type_points(
    path, types: Sequence[str], depth: int
) -> List[TypePoint]:
    """Points of ``types`` from a CSV or JSON file (the formats of
    :func:`~.points.load_points`) with an ``n_<type>`` column per type; a
    type's column may be left out where no point removes it."""
    path = Path(path)
    text = check_input_file(path, 'MAP points file').read_text(
        encoding='utf-8-sig'
    )
    read = (
        _read_json_records if text.lstrip()[:1] in '[{' else _read_csv_records
    )
    records, locations = read(text, path)
    return parse_type_points(records, types, depth, locations)


def parse_type_points(
    records: Sequence[Mapping], types: Sequence[str], depth: int, locations
) -> List[TypePoint]:
    """Records (CSV rows, dicts; names case-insensitive) of ``accuracy``
    (or ``acc``) and ``n_<type>`` removed counts of ``types``; errors name
    the row (``locations``)."""
    depth = check_depth(depth)
    points = []
    for record, where in zip(records, locations):
        fields = {
            _normalise_key(k): v for k, v in record.items() if k is not None
        }
        accuracy = next(
            (
                _as_number(fields[name], name, where)
                for name in ACCURACY_COLUMNS
                if _is_given(fields.get(name))
            ),
            float('nan'),
        )
        if not 0 <= accuracy <= 100:
            raise ValueError(f'{where}: accuracy {accuracy:g} is not 0..100')
        counts = []
        for column in map(count_column, types):
            value = fields.get(column)
            count = _as_number(value, column, where) if _is_given(value) else 0
            if not (float(count).is_integer() and 0 <= count <= depth):
                raise ValueError(
                    f'{where}: {column}={count:g} not in 0..{depth}'
                )
            counts.append(int(count))
        points.append(TypePoint(tuple(counts), accuracy))
    _check_accuracy_units(points, locations)
    return points


@dataclass(frozen=True)
class TypeFit:
    """A MAP of several layer types: a polynomial of the retained ratios of
    the ``fitted`` types (those some point removes), with the degree of
    lowest leave-2-out CV RMSE; ``points`` are the distinct ones, repeats
    averaged."""

    types: Tuple[str, ...]
    depth: int
    fitted: Tuple[str, ...]
    degree: int
    coefficients: Tuple[float, ...]
    scores: Tuple[DegreeScore, ...]
    points: Tuple[TypePoint, ...]

    @property
    def terms(self) -> List[Tuple[int, ...]]:
        return polynomial_terms(self.degree, len(self.fitted))

    @property
    def term_names(self) -> List[str]:
        names = [f'r_{t}' for t in self.fitted]
        return [term_name(term, names) for term in self.terms]

    @property
    def chosen(self) -> DegreeScore:
        return next(s for s in self.scores if s.degree == self.degree)

    def ratios(self, counts) -> np.ndarray:
        """Retained ratios ``(..., fitted)`` of counts ``(..., types)``."""
        counts = np.asarray(counts, float)
        columns = [self.types.index(t) for t in self.fitted]
        return (self.depth - counts[..., columns]) / self.depth

    def predict(self, counts) -> np.ndarray:
        """Predicted accuracy of removed counts ``(..., types)``."""
        ratios = self.ratios(counts)
        design = monomials(np.moveaxis(ratios, -1, 0), self.terms)
        return design @ np.asarray(self.coefficients)

    def in_data_hull(self, counts) -> np.ndarray:
        return inside_hull(self._hull, self.ratios(counts))

    @cached_property
    def _hull(self) -> ConvexHull:
        # The fit has full rank, so its points span a volume.
        return ConvexHull(self.ratios([p.counts for p in self.points]))

    def format_table(self) -> str:
        return format_cv_table(self.scores, self.degree, len(self.points))

    def format_polynomial(self) -> str:
        head = f'P({", ".join(f"r_{t}" for t in self.fitted)})'
        return format_polynomial(self.coefficients, self.term_names, head)


def fit_types(
    points: Iterable[TypePoint],
    types: Sequence[str],
    depth: int,
    degrees: Iterable[int] = (1, 2, 3, 4),
) -> TypeFit:
    """Least squares of the accuracy on the retained ratios of the types
    some point removes (repeats of a split averaged first), at the degree
    of lowest leave-2-out CV RMSE."""
    groups: Dict[Tuple[int, ...], List[float]] = {}
    for point in points:
        groups.setdefault(point.counts, []).append(point.accuracy)
    distinct = tuple(
        TypePoint(counts, float(np.mean(accuracies)))
        for counts, accuracies in groups.items()
    )
    types, depth = tuple(types), check_depth(depth)
    fitted = tuple(
        t
        for index, t in enumerate(types)
        if any(p.counts[index] for p in distinct)
    )
    fit = TypeFit(types, depth, fitted, 0, (), (), distinct)
    ratios = fit.ratios([p.counts for p in distinct])
    degree, coefficients, scores = fit_degrees(
        list(ratios.T),
        np.array([p.accuracy for p in distinct]),
        degrees,
        f'({", ".join(fitted)})',
    )
    return TypeFit(
        types, depth, fitted, degree, coefficients, scores, distinct
    )


@dataclass(frozen=True)
class TypeCost:
    """The cost of a network with layers of each type removed: the dense
    total and the saving per removed layer of each type (analytic MACs at
    the deployment resolution, or a measured latency), savings adding up.

    JSON (any unit, used consistently)::

        {"dense_total": 512.0, "savings": {"attn_window": 9.1,
         "attn_global": 35.4, "act": 16.9}}
    """

    dense_total: float
    savings: Mapping[str, float]
    source: str = 'cost'

    def __post_init__(self):
        values = [self.dense_total, *self.savings.values()]
        if not all(map(is_finite_number, values)) or min(values) < 0:
            raise ValueError(f'{self.source}: costs must be numbers >= 0')

    @classmethod
    def from_layer_macs(
        cls, macs: Mapping, types: Mapping[str, LayerType]
    ) -> 'TypeCost':
        """From a family's ``layer_macs`` (per block) and its layer types:
        a type's saving is the mean over its blocks (one value per type in
        SAM's and ViTDet's encoders)."""
        saved = dict(attn=macs['attn'])
        saved['act'] = [f - m for f, m in zip(macs['ffn'], macs['merged_ffn'])]
        saved['ffn'] = macs['ffn']
        dense = macs['rest'] + sum(macs['attn']) + sum(macs['ffn'])
        return cls(
            float(dense),
            {
                name: float(np.mean([saved[kind][i] for i in blocks]))
                for name, (kind, blocks) in types.items()
            },
            'analytic MACs',
        )

    @classmethod
    def from_json(cls, path) -> 'TypeCost':
        data = read_json_file(path, 'measured cost file')
        try:
            return cls(data['dense_total'], dict(data['savings']), str(path))
        except (KeyError, TypeError):
            raise ValueError(f'{path}: give dense_total and savings') from None

    def speedup(self, counts: Mapping[str, int]) -> float:
        saved = sum(n * self.savings[t] for t, n in counts.items())
        if saved >= self.dense_total:
            raise ValueError(f'{self.source}: {counts} save all dense_total')
        return self.dense_total / (self.dense_total - saved)

    def describe(self) -> str:
        per_type = ', '.join(f'{t} {s:.4g}' for t, s in self.savings.items())
        return (
            f'{self.source}: dense {self.dense_total:.4g}, saved per '
            f'removed layer: {per_type}'
        )


@dataclass(frozen=True)
class TypeCandidate:
    """A split: removed layers per type, MAP's prediction, and the speedup
    under a cost (``None`` without one)."""

    counts: Tuple[int, ...]
    predicted_accuracy: float
    extrapolated: bool
    speedup: Optional[float] = None

    @property
    def removed(self) -> int:
        return sum(self.counts)


@dataclass(frozen=True)
class TypeAllocation:
    """``best`` maximises the predicted accuracy over ``candidates`` (the
    first on ties; with a speedup target, among those reaching it)."""

    types: Tuple[str, ...]
    best: TypeCandidate
    candidates: Tuple[TypeCandidate, ...]

    def counts(self) -> Dict[str, int]:
        return dict(zip(self.types, self.best.counts))

    def format_table(self) -> str:
        header = ''.join(f' {count_column(t):>14}' for t in self.types)
        lines = [f' {header} {"predicted":>9} {"extrapolated":>12}']
        if any(c.speedup is not None for c in self.candidates):
            lines[0] += f' {"speedup":>8}'
        for c in self.candidates:
            line = '*' if c == self.best else ' '
            line += ''.join(f' {n:>14}' for n in c.counts)
            line += f' {c.predicted_accuracy:>9.3f}'
            line += f' {"yes" if c.extrapolated else "no":>12}'
            if c.speedup is not None:
                line += f' {c.speedup:>7.3f}x'
            lines.append(line)
        return '\n'.join(lines)

    def to_json(self) -> str:
        return json.dumps(
            dict(
                types=list(self.types),
                best=vars(self.best),
                candidates=[vars(c) for c in self.candidates],
            )
        )


def _splits(
    fit: TypeFit, sizes: Mapping[str, int], bounds: Bounds, total=None
) -> List[Tuple[int, ...]]:
    """Count tuples with each fitted type's count in ``bounds`` (and its
    number of layers), the others 0; with ``total`` only those summing to
    it, in the order of the two-type search (first type ascending)."""
    lo, hi = resolve_bounds(bounds, fit.depth)
    ranges = [
        range(lo, min(hi, sizes[t]) + 1) if t in fit.fitted else range(1)
        for t in fit.types
    ]
    return [
        counts
        for counts in itertools.product(*ranges)
        if total is None or sum(counts) == total
    ]


def _candidates(fit, splits, cost) -> List[TypeCandidate]:
    if not splits:
        return []
    predicted = fit.predict(splits)
    inside = fit.in_data_hull(splits)
    return [
        TypeCandidate(
            counts,
            float(p),
            not ok,
            None
            if cost is None
            else cost.speedup(dict(zip(fit.types, counts))),
        )
        for counts, p, ok in zip(splits, predicted, inside)
    ]


def allocate_types(
    fit: TypeFit,
    budget: int,
    sizes: Mapping[str, int],
    bounds: Bounds = 'full',
    cost: Optional[TypeCost] = None,
) -> TypeAllocation:
    """MAP's split of ``budget`` removed layers over the fitted types,
    each count in ``bounds`` and at most the type's number of layers
    (``sizes``); a type without points removes none."""
    budget = as_int(budget, 'budget')
    candidates = _candidates(fit, _splits(fit, sizes, bounds, budget), cost)
    if not candidates:
        raise ValueError(
            f'budget {budget} does not fit {dict(sizes)} in bounds {bounds!r}'
        )
    best = max(candidates, key=lambda c: c.predicted_accuracy)
    return TypeAllocation(fit.types, best, tuple(candidates))


def allocate_types_for_speedup(
    fit: TypeFit,
    sizes: Mapping[str, int],
    cost: TypeCost,
    target: float,
    bounds: Bounds = 'full',
) -> TypeAllocation:
    """The most accurate split (any number of removed layers) whose
    speedup under ``cost`` reaches ``target``; ties go to the faster."""
    candidates = _candidates(fit, _splits(fit, sizes, bounds), cost)
    feasible = [c for c in candidates if c.speedup >= target * (1 - 1e-12)]
    if not feasible:
        fastest = max(c.speedup for c in candidates)
        raise ValueError(
            f'no split reaches {target:g}x, at most {fastest:.3f}x'
        )
    best = max(feasible, key=lambda c: (c.predicted_accuracy, c.speedup))
    return TypeAllocation(fit.types, best, tuple(feasible))
