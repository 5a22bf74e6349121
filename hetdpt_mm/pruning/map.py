"""Model Accuracy Predictor (MAP), HetDPT stage 1 step 1 (METHOD.md section 2).

MAP predicts the fine-tuned accuracy of a depth-pruned ViT from the retained
ratios ``a`` (attention sublayers kept) and ``t`` (GELU activations kept)
with a bivariate polynomial ``P(a, t) = sum_{i+j<=k} theta_ij a^i t^j``, and
splits a budget of removed layers between the two types by maximising ``P``.

Typical use::

    points = load_points('map_points.csv', depth=12)
    fit = fit_map(points)                  # degree by leave-2-out CV
    print(fit.format_table())
    allocation = allocate(fit, budget=8, depth=12, bounds='full')
    print(allocation.format_table())
"""
import csv
import io
import json
import math
import numbers
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import (
    Any,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

import numpy as np
from scipy.spatial import ConvexHull, QhullError

from ..fileio import check_input_file
from ..spec import ACT, LAYER_KINDS
from .validation import as_int, check_depth

__all__ = [
    'MAPPoint', 'DegreeScore', 'MAPFit', 'Candidate', 'Allocation',
    'load_points', 'parse_points', 'polynomial_terms', 'term_name',
    'average_duplicates', 'fit_map', 'resolve_bounds', 'evaluate_candidates',
    'format_candidates',
    'allocate',
]

ACCURACY_COLUMNS = ('accuracy', 'acc')
COUNT_COLUMNS = ('n_attn', 'n_act')
RATIO_COLUMNS = ('a', 't')
# Ratios stored next to counts may be rounded to two decimals, as in the
# paper's table (11/12 -> 0.92); one layer at depth <= 50 differs by >= 0.02.
RATIO_TOLERANCE = 0.01
# A candidate this close to the data's convex hull counts as inside it.
HULL_TOLERANCE = 1e-9
#: Leave-2-out CV fits n(n-1)/2 folds (in closed form, but still O(n^2)
#: memory and time): 2,000 distinct points are about 2 million folds.
MAX_CV_POINTS = 2000
FIT_FORMAT = 'hetdpt_mm.map_fit'
FIT_FORMAT_VERSION = 1

Bounds = Union[str, Tuple[int, int]]


@dataclass(frozen=True)
class MAPPoint:
    """One observation: retained ratios and the accuracy after fine-tuning."""
    a: float
    t: float
    accuracy: float


# ---------------------------------------------------------------- loading --

def load_points(path: Union[str, Path],
                depth: Optional[int] = None) -> List[MAPPoint]:
    """Read MAP points from a CSV file or a JSON file.

    JSON holds a list of objects or ``{"points": [...]}``; a file whose first
    non-blank character is ``[`` or ``{`` is read as JSON, anything else as
    CSV with a header row. See :func:`parse_points` for the columns.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f'MAP points file not found: {path}')
    try:
        text = check_input_file(path, 'MAP points file').read_text(
            encoding='utf-8-sig')
    except UnicodeDecodeError as err:
        raise ValueError(f'{path}: not UTF-8 text ({err.reason})') from None
    if not text.strip():
        raise ValueError(f'{path}: file is empty')
    if text.lstrip()[0] in '[{':
        return _parse_json_points(text, path, depth)
    return _parse_csv_points(text, path, depth)


def _parse_json_points(text: str, path: Path,
                       depth: Optional[int]) -> List[MAPPoint]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f'{path}: not valid JSON ({err})') from None
    if isinstance(data, dict):
        if 'points' not in data:
            raise ValueError(f'{path}: a JSON object must have a "points" '
                             f'list; found keys {sorted(data)}')
        data = data['points']
    if not isinstance(data, list):
        raise ValueError(f'{path}: expected a list of points, '
                         f'got {type(data).__name__}')
    if not data:
        raise ValueError(f'{path}: contains no points')
    for index, record in enumerate(data, start=1):
        if not isinstance(record, dict):
            raise ValueError(f'{path}, point {index}: expected an object, '
                             f'got {type(record).__name__}')
    return parse_points(data, depth=depth, source=str(path),
                        locations=[f'{path}, point {index}'
                                   for index in range(1, len(data) + 1)])


def _parse_csv_points(text: str, path: Path,
                      depth: Optional[int]) -> List[MAPPoint]:
    reader = csv.DictReader(io.StringIO(text))
    # DictReader keeps the last of two columns of one name.
    counts = Counter(map(_normalise_key, reader.fieldnames or ()))
    for name in (*ACCURACY_COLUMNS, *COUNT_COLUMNS, *RATIO_COLUMNS):
        if counts[name] > 1:
            times = 'twice' if counts[name] == 2 else f'{counts[name]} times'
            raise ValueError(f'{path}: column "{name}" appears {times} in '
                             'the header; give each column once')
    records, locations = [], []
    for row in reader:
        records.append(row)
        locations.append(f'{path}, row {len(records)} '
                         f'(line {reader.line_num})')
    if not records:
        raise ValueError(f'{path}: no data rows (only a header)')
    return parse_points(records, depth=depth, source=str(path),
                        locations=locations)


def parse_points(records: Sequence[Mapping[str, Any]],
                 depth: Optional[int] = None, source: str = 'points',
                 locations: Optional[Sequence[str]] = None
                 ) -> List[MAPPoint]:
    """Turn records (dicts, e.g. CSV rows) into :class:`MAPPoint` objects.

    Each record gives ``accuracy`` (or ``acc``) and either removed counts
    ``n_attn, n_act`` (converted with ``depth``) or retained ratios ``a, t``.
    With ``depth`` given, counts win and ratios in the same record must
    agree with them to ``RATIO_TOLERANCE``; without it, ratios are used.
    Column names are case-insensitive; other columns are ignored. Errors
    name ``source`` and the record (``locations[i]``, default ``row i``).
    """
    if depth is not None:
        depth = check_depth(depth)
    if not records:
        raise ValueError(f'{source}: contains no points')
    if locations is None:
        locations = [f'{source}, row {index}'
                     for index in range(1, len(records) + 1)]
    columns = {_normalise_key(key) for record in records for key in record
               if key is not None}
    has_accuracy = any(name in columns for name in ACCURACY_COLUMNS)
    has_counts = set(COUNT_COLUMNS) <= columns
    has_ratios = set(RATIO_COLUMNS) <= columns
    if not has_accuracy or not (has_counts or has_ratios):
        raise ValueError(
            f'{source}: no usable columns: need "accuracy" (or "acc") and '
            'either "a" and "t" (retained ratios) or "n_attn" and "n_act" '
            f'(removed counts, with depth); found {sorted(columns)}')
    if has_counts and not has_ratios and depth is None:
        raise ValueError(
            f'{source}: points give removed counts (n_attn, n_act) but no '
            'depth was given to convert them into retained ratios; pass '
            'the number of blocks as depth')
    use_counts = has_counts and depth is not None
    points = [_point_from_record(record, depth if use_counts else None, where)
              for record, where in zip(records, locations)]
    _check_accuracy_units(points, locations)
    return points


def _check_accuracy_units(points: Sequence[MAPPoint],
                          locations: Sequence[str]) -> None:
    """Accuracies are all percentages or all fractions: a file mixing 81.8
    and 0.818 would fit a surface through both."""
    fractions = [where for point, where in zip(points, locations)
                 if point.accuracy <= 1]
    if fractions and len(fractions) < len(points):
        percent = next(where for point, where in zip(points, locations)
                       if point.accuracy > 1)
        raise ValueError(
            f'accuracies mix fractions (<= 1, e.g. {fractions[0]}) and '
            f'percentages (> 1, e.g. {percent}); give all in one unit')


def _normalise_key(key: Any) -> str:
    return str(key).strip().lower()


def _point_from_record(record: Mapping[str, Any], depth: Optional[int],
                       where: str) -> MAPPoint:
    fields = {_normalise_key(key): value for key, value in record.items()
              if key is not None}
    values = {name: _as_number(fields[name], name, where)
              for name in (*ACCURACY_COLUMNS, *COUNT_COLUMNS, *RATIO_COLUMNS)
              if _is_given(fields.get(name))}

    accuracy = next((values[name] for name in ACCURACY_COLUMNS
                     if name in values), None)
    if accuracy is None:
        raise ValueError(f'{where}: no accuracy value')
    if not (math.isfinite(accuracy) and 0 <= accuracy <= 100):
        raise ValueError(f'{where}: accuracy is {accuracy:g}; it must be a '
                         'percentage (0 to 100) or a fraction (0 to 1)')

    if depth is not None:
        a, t = (_ratio_from_count(values, name, depth, where)
                for name in COUNT_COLUMNS)
        for name, derived in zip(RATIO_COLUMNS, (a, t)):
            given = values.get(name)
            if given is not None and abs(given - derived) > RATIO_TOLERANCE:
                count_name = COUNT_COLUMNS[RATIO_COLUMNS.index(name)]
                raise ValueError(
                    f'{where}: {name}={given:g} disagrees with '
                    f'{count_name}={values[count_name]:g} at depth {depth} '
                    f'(which gives {name}={derived:.4f})')
    else:
        a, t = (_checked_ratio(values, name, where) for name in RATIO_COLUMNS)
    return MAPPoint(a=a, t=t, accuracy=accuracy)


def _is_given(value: Any) -> bool:
    return value is not None and not (isinstance(value, str)
                                      and not value.strip())


def _as_number(value: Any, name: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, str)):
        raise ValueError(f'{where}: column "{name}" value {value!r} is not a '
                         'number')
    try:
        return float(value)
    except ValueError:
        raise ValueError(f'{where}: column "{name}" value {value!r} is not '
                         'a number') from None


def _ratio_from_count(values: Mapping[str, float], name: str, depth: int,
                      where: str) -> float:
    if name not in values:
        raise ValueError(f'{where}: missing value for "{name}"')
    count = values[name]
    if not (math.isfinite(count) and count.is_integer()):
        raise ValueError(f'{where}: {name}={count:g} is not a whole number '
                         'of removed layers')
    if not 0 <= count <= depth:
        raise ValueError(f'{where}: {name}={count:g} is outside [0, {depth}] '
                         f'(depth {depth})')
    return (depth - count) / depth


def _checked_ratio(values: Mapping[str, float], name: str,
                   where: str) -> float:
    if name not in values:
        raise ValueError(f'{where}: missing value for "{name}"')
    ratio = values[name]
    if not 0.0 <= ratio <= 1.0:  # also rejects NaN
        raise ValueError(f'{where}: ratio {name}={ratio:g} is outside [0, 1]')
    return ratio


# ---------------------------------------------------------------- fitting --

def polynomial_terms(degree: int) -> List[Tuple[int, int]]:
    """Exponents ``(i, j)`` of the terms ``a^i t^j`` with ``i + j <= degree``,
    ordered by total degree, then by decreasing power of ``a``."""
    return [(total - j, j) for total in range(degree + 1)
            for j in range(total + 1)]


def term_name(a_power: int, t_power: int) -> str:
    """``'1'``, ``'a'``, ``'a^2*t'``, ..."""
    factors = [name if power == 1 else f'{name}^{power}'
               for name, power in (('a', a_power), ('t', t_power)) if power]
    return '*'.join(factors) or '1'


def _design_matrix(a: np.ndarray, t: np.ndarray,
                   terms: Sequence[Tuple[int, int]]) -> np.ndarray:
    return np.stack([a**i * t**j for i, j in terms], axis=-1)


@dataclass(frozen=True)
class DegreeScore:
    """Leave-2-out cross-validation result for one polynomial degree.

    ``rank_deficient_folds`` counts training folds whose least-squares
    problem had no unique solution (numpy then returns the minimum-norm
    one). A skipped degree has ``skipped`` set and no errors.
    """
    degree: int
    n_terms: int
    cv_mae: Optional[float] = None
    cv_rmse: Optional[float] = None
    train_rmse: Optional[float] = None
    rank_deficient_folds: int = 0
    skipped: Optional[str] = None


def _leave_two_out(X: np.ndarray, y: np.ndarray) -> Tuple[np.ndarray, int]:
    """Hold out every unordered pair once; return each point's mean
    prediction over the ``n - 1`` folds that held it out, and the number
    of rank-deficient folds.

    In closed form: with the hat matrix ``H`` of the full fit and its
    residuals ``e``, the errors on a held-out pair ``S`` are
    ``(I - H_SS)^-1 e_S``.  A fold whose ``I - H_SS`` is (nearly) singular
    is solved directly; one without a unique least-squares fit gets numpy's
    minimum-norm solution."""
    n = len(y)
    basis = np.linalg.qr(X)[0]  # X has full column rank (_score_degree)
    hat = basis @ basis.T
    residual = y - hat @ y
    first, second = np.triu_indices(n, 1)
    h11 = 1 - hat[first, first]
    h22 = 1 - hat[second, second]
    h12 = -hat[first, second]
    det = h11 * h22 - h12 * h12
    # det is in [0, 1]; near 0 the closed form loses its precision (a fold
    # of the paper's points at degree 3 has det 4e-10), so such folds are
    # solved directly and lstsq's rank says whether they are deficient.
    direct = np.abs(det) < 1e-6
    det[direct] = 1.0
    error_first = (h22 * residual[first] - h12 * residual[second]) / det
    error_second = (h11 * residual[second] - h12 * residual[first]) / det
    rank_deficient = 0
    for fold in np.flatnonzero(direct):
        held_out = [first[fold], second[fold]]
        train = np.ones(n, dtype=bool)
        train[held_out] = False
        theta, _, rank, _ = np.linalg.lstsq(X[train], y[train], rcond=None)
        rank_deficient += rank < X.shape[1]
        error_first[fold], error_second[fold] = y[held_out] - X[held_out] @ \
            theta
    prediction_sum = np.zeros(n)
    np.add.at(prediction_sum, first, y[first] - error_first)
    np.add.at(prediction_sum, second, y[second] - error_second)
    return prediction_sum / (n - 1), rank_deficient


def average_duplicates(points: Sequence[MAPPoint]
                       ) -> Tuple[Tuple[MAPPoint, ...], int]:
    """One point per ``(a, t)``, with the mean accuracy of its repeats
    (repeated runs of one split); and how many rows were merged away.
    Repeats would otherwise weigh a split several times and make leave-2-out
    folds hold out a point while training on its twin."""
    groups: Dict[Tuple[float, float], List[float]] = {}
    for point in points:
        groups.setdefault((point.a, point.t), []).append(point.accuracy)
    averaged = tuple(MAPPoint(a, t, float(np.mean(accuracies)))
                     for (a, t), accuracies in groups.items())
    return averaged, len(points) - len(averaged)


def _score_degree(degree: int, a: np.ndarray, t: np.ndarray,
                  y: np.ndarray) -> Tuple[DegreeScore, Optional[np.ndarray]]:
    terms = polynomial_terms(degree)
    n = len(y)
    if len(terms) > n - 2:
        return DegreeScore(degree, len(terms), skipped=(
            f'{len(terms)} terms > {n - 2} points per training fold')), None
    X = _design_matrix(a, t, terms)
    theta, _, rank, _ = np.linalg.lstsq(X, y, rcond=None)
    # Without full rank the points do not determine the polynomial: the
    # coefficients, and predictions away from the points, would be arbitrary.
    if rank < len(terms):
        return DegreeScore(degree, len(terms), skipped=(
            f'rank-deficient: the points determine only {rank} of '
            f'{len(terms)} coefficients')), None
    cv_prediction, rank_deficient_folds = _leave_two_out(X, y)
    cv_error = cv_prediction - y
    score = DegreeScore(
        degree, len(terms),
        cv_mae=float(np.mean(np.abs(cv_error))),
        cv_rmse=float(np.sqrt(np.mean(cv_error**2))),
        train_rmse=float(np.sqrt(np.mean((X @ theta - y)**2))),
        rank_deficient_folds=int(rank_deficient_folds))
    return score, theta


def fit_map(points: Iterable[Union[MAPPoint, Sequence[float]]],
            degrees: Iterable[int] = (1, 2, 3, 4)) -> 'MAPFit':
    """Fit MAP by least squares, choosing the degree by leave-2-out CV.

    Every degree in ``degrees`` is scored unless it has more terms than a
    training fold has points (``n - 2``) or the points leave it
    rank-deficient; the degree with the lowest CV RMSE wins (ties go to the
    lower degree). ``points`` are :class:`MAPPoint` or ``(a, t, accuracy)``;
    repeats of one ``(a, t)`` are averaged first (:func:`average_duplicates`).
    """
    points = tuple(p if isinstance(p, MAPPoint) else MAPPoint(*map(float, p))
                   for p in points)
    degrees = _check_degrees(degrees)
    values = np.array([(p.a, p.t, p.accuracy) for p in points],
                      dtype=float).reshape(-1, 3)
    if not np.isfinite(values).all():
        raise ValueError('MAP points must be finite numbers')
    points, _ = average_duplicates(points)
    if len(points) > MAX_CV_POINTS:
        raise ValueError(
            f'{len(points)} distinct (a, t) points: leave-2-out CV is capped '
            f'at {MAX_CV_POINTS} points '
            f'({len(points) * (len(points) - 1) // 2} folds here); MAP needs '
            'one point per split tried, so average repeated measurements or '
            'subsample')
    values = np.array([(p.a, p.t, p.accuracy) for p in points], dtype=float)
    needed = len(polynomial_terms(degrees[0])) + 2
    if len(points) < needed:
        raise ValueError(
            f'MAP needs at least {needed} points to fit degree {degrees[0]} '
            f'({needed - 2} terms, and leave-2-out CV trains on n - 2 '
            f'points); got {len(points)} distinct (a, t) points')
    a, t, y = values.T
    scores, coefficients = [], {}
    for degree in degrees:
        score, theta = _score_degree(degree, a, t, y)
        scores.append(score)
        if theta is not None:
            coefficients[degree] = theta
    if not coefficients:
        reasons = '; '.join(f'degree {s.degree}: {s.skipped}' for s in scores)
        raise ValueError(f'no degree could be fitted to {len(points)} '
                         f'points ({reasons})')
    chosen = min((s for s in scores if s.skipped is None),
                 key=lambda s: s.cv_rmse)
    return MAPFit(degree=chosen.degree,
                  coefficients=tuple(map(float, coefficients[chosen.degree])),
                  scores=tuple(scores), points=points)


def _check_degrees(degrees: Iterable[int]) -> List[int]:
    degrees = [as_int(d, 'degree') for d in degrees]
    if not degrees:
        raise ValueError('at least one polynomial degree is needed')
    if any(d < 1 for d in degrees):
        raise ValueError(f'degrees must be >= 1, got {degrees}')
    if len(set(degrees)) != len(degrees):
        raise ValueError(f'degrees must be distinct, got {degrees}')
    return sorted(degrees)


@dataclass(frozen=True)
class MAPFit:
    """A fitted Model Accuracy Predictor.

    ``coefficients[i]`` multiplies ``terms[i]`` (see :func:`polynomial_terms`);
    ``scores`` holds the CV table over all tried degrees; ``points`` are the
    observations it was fitted to (kept to flag extrapolation).
    """
    degree: int
    coefficients: Tuple[float, ...]
    scores: Tuple[DegreeScore, ...]
    points: Tuple[MAPPoint, ...]

    @property
    def terms(self) -> List[Tuple[int, int]]:
        return polynomial_terms(self.degree)

    @property
    def term_names(self) -> List[str]:
        return [term_name(i, j) for i, j in self.terms]

    @property
    def chosen(self) -> DegreeScore:
        return next(s for s in self.scores if s.degree == self.degree)

    @property
    def cv_mae(self) -> float:
        return self.chosen.cv_mae

    @property
    def cv_rmse(self) -> float:
        return self.chosen.cv_rmse

    def predict(self, a, t):
        """Predicted accuracy at retained ratios ``(a, t)``; broadcasts like
        numpy, returns a float for scalar inputs."""
        a_arr, t_arr = np.broadcast_arrays(np.asarray(a, dtype=float),
                                           np.asarray(t, dtype=float))
        prediction = _design_matrix(a_arr, t_arr, self.terms) @ np.asarray(
            self.coefficients)
        return float(prediction) if prediction.ndim == 0 else prediction

    def in_data_hull(self, a, t) -> np.ndarray:
        """Whether ``(a, t)`` lies in the convex hull of the fitted points,
        where the polynomial interpolates rather than extrapolates."""
        query = np.stack(np.broadcast_arrays(np.asarray(a, dtype=float),
                                             np.asarray(t, dtype=float)), -1)
        # Rows of `equations` are unit outward normals n and offsets c of
        # the hull's edges: inside <=> n.x + c <= 0 for every edge.
        distances = (query @ self._hull.equations[:, :2].T
                     + self._hull.equations[:, 2])
        return np.all(distances <= HULL_TOLERANCE, axis=-1)

    @property
    def hull_vertices(self) -> np.ndarray:
        """Corners ``(a, t)`` of the fitted points' convex hull, in
        counter-clockwise order."""
        return self._hull.points[self._hull.vertices]

    @cached_property
    def _hull(self) -> ConvexHull:
        # A full-rank fit of degree >= 1 needs points spanning an area, so
        # the hull is a proper polygon.
        try:
            return ConvexHull([(p.a, p.t) for p in self.points])
        except QhullError:
            raise ValueError('MAP points must not all lie on one line') \
                from None

    def to_dict(self) -> Dict[str, Any]:
        """JSON-serialisable form; :meth:`from_dict` restores it exactly."""
        return {
            'format': FIT_FORMAT,
            'version': FIT_FORMAT_VERSION,
            'degree': self.degree,
            'terms': [{'name': term_name(i, j), 'a_power': i, 't_power': j,
                       'coefficient': c}
                      for (i, j), c in zip(self.terms, self.coefficients)],
            'cv': [vars(score).copy() for score in self.scores],
            'points': [vars(point).copy() for point in self.points],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> 'MAPFit':
        """Rebuild a fit saved with :meth:`to_dict`; raises ``ValueError`` on
        anything malformed."""
        try:
            if data.get('format') != FIT_FORMAT:
                raise ValueError(f'format is {data.get("format")!r}, '
                                 f'expected {FIT_FORMAT!r}')
            if data.get('version') != FIT_FORMAT_VERSION:
                raise ValueError(
                    f'unsupported version {data.get("version")!r}')
            degree = as_int(data['degree'], 'degree')
            terms = [(t['a_power'], t['t_power']) for t in data['terms']]
            if terms != polynomial_terms(degree):
                raise ValueError(f'terms do not match degree {degree}')
            coefficients = tuple(float(t['coefficient'])
                                 for t in data['terms'])
            if not all(map(math.isfinite, coefficients)):
                raise ValueError('coefficients must be finite')
            scores = tuple(DegreeScore(**s) for s in data['cv'])
            if not any(s.degree == degree and s.skipped is None
                       for s in scores):
                raise ValueError(f'the CV table has no fitted degree {degree}')
            points = tuple(MAPPoint(**p) for p in data['points'])
            fit = cls(degree=degree, coefficients=coefficients, scores=scores,
                      points=points)
            fit.hull_vertices  # noqa: B018  fails unless points span an area
        except (KeyError, TypeError, AttributeError) as err:
            raise ValueError(f'malformed MAP fit: {type(err).__name__}: '
                             f'{err}') from None
        except ValueError as err:
            raise ValueError(f'malformed MAP fit: {err}') from None
        return fit

    def format_table(self) -> str:
        """The CV table over degrees, the chosen one marked with ``*``."""
        lines = [f'{"degree":>7} {"terms":>5} {"cv_mae":>8} {"cv_rmse":>8} '
                 f'{"train_rmse":>10}  note']
        for s in self.scores:
            mark = '*' if s.degree == self.degree else ' '
            if s.skipped:
                lines.append(f'{mark}{s.degree:>6} {s.n_terms:>5} '
                             f'{"-":>8} {"-":>8} {"-":>10}  '
                             f'skipped: {s.skipped}')
                continue
            note = ('chosen (lowest CV RMSE)' if s.degree == self.degree
                    else '')
            if s.rank_deficient_folds:
                n_folds = len(self.points) * (len(self.points) - 1) // 2
                note = ', '.join(filter(None, [
                    note, f'{s.rank_deficient_folds} of {n_folds} folds '
                    'rank-deficient']))
            lines.append(f'{mark}{s.degree:>6} {s.n_terms:>5} '
                         f'{s.cv_mae:>8.4f} {s.cv_rmse:>8.4f} '
                         f'{s.train_rmse:>10.4f}  {note}'.rstrip())
        return '\n'.join(lines)

    def format_polynomial(self) -> str:
        """``P(a, t) = c0 + c1*a + ...`` with the fitted coefficients."""
        parts = [f'{c:+.6g}' + ('' if name == '1' else f'*{name}')
                 for c, name in zip(self.coefficients, self.term_names)]
        return 'P(a, t) = ' + ' '.join(parts).lstrip('+')


# ------------------------------------------------------------- allocation --

@dataclass(frozen=True)
class Candidate:
    """One split of removed layers with MAP's prediction for it."""
    n_attn: int
    n_act: int
    a: float
    t: float
    predicted_accuracy: float
    extrapolated: bool

    @property
    def removed(self) -> int:
        return self.n_attn + self.n_act


def resolve_bounds(bounds: Bounds, depth: int) -> Tuple[int, int]:
    """Per-type count bounds: ``'full'`` = ``0..depth``, ``'paper'`` =
    ``1..depth-1`` (the authors' snippet), or an explicit ``(lo, hi)``."""
    depth = check_depth(depth)
    if isinstance(bounds, str):
        named = {'full': (0, depth), 'paper': (1, depth - 1)}
        if bounds not in named:
            raise ValueError(f'bounds must be "full", "paper" or (lo, hi), '
                             f'got {bounds!r}')
        return named[bounds]
    try:
        lo, hi = bounds
    except (TypeError, ValueError):
        raise ValueError(f'bounds must be "full", "paper" or (lo, hi), '
                         f'got {bounds!r}') from None
    lo, hi = as_int(lo, 'lower bound'), as_int(hi, 'upper bound')
    if not 0 <= lo <= hi <= depth:
        raise ValueError(f'bounds ({lo}, {hi}) must satisfy '
                         f'0 <= lo <= hi <= depth ({depth})')
    return lo, hi


def evaluate_candidates(fit: MAPFit, depth: int,
                        pairs: Iterable[Tuple[int, int]]) -> List[Candidate]:
    """MAP's prediction, and whether it extrapolates, for each
    ``(n_attn, n_act)`` pair of removed counts."""
    pairs = list(pairs)
    counts = np.array(pairs, dtype=float).reshape(-1, 2)
    a, t = ((depth - counts) / depth).T
    predicted = np.atleast_1d(fit.predict(a, t))
    inside = fit.in_data_hull(a, t)
    return [Candidate(int(n_attn), int(n_act), float(ai), float(ti),
                      float(p), not bool(ok))
            for (n_attn, n_act), ai, ti, p, ok
            in zip(pairs, a, t, predicted, inside)]


@dataclass(frozen=True)
class Allocation:
    """MAP's split of a budget of removed layers: ``best`` is the argmax of
    the predicted accuracy over ``candidates`` (first one on ties)."""
    budget: int
    depth: int
    bounds: Tuple[int, int]
    best: Candidate
    candidates: Tuple[Candidate, ...]

    @property
    def n_attn(self) -> int:
        return self.best.n_attn

    @property
    def n_act(self) -> int:
        return self.best.n_act

    def format_table(self) -> str:
        """Every candidate, the argmax marked with ``*``."""
        return format_candidates(self.candidates, self.best)

    def to_dict(self) -> Dict[str, Any]:
        """JSON-serialisable form; :meth:`from_dict` restores it exactly."""
        return dict(budget=self.budget, depth=self.depth,
                    bounds=list(self.bounds), best=vars(self.best).copy(),
                    candidates=[vars(c).copy() for c in self.candidates])

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> 'Allocation':
        """Rebuild an allocation saved with :meth:`to_dict`; raises
        ``ValueError`` on anything malformed."""
        try:
            lo, hi = data['bounds']
            allocation = cls(
                budget=as_int(data['budget'], 'budget'),
                depth=as_int(data['depth'], 'depth'),
                bounds=(as_int(lo, 'lower bound'),
                        as_int(hi, 'upper bound')),
                best=Candidate(**data['best']),
                candidates=tuple(Candidate(**c) for c in data['candidates']))
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f'malformed MAP allocation: '
                             f'{type(err).__name__}: {err}') from None
        if allocation.best not in allocation.candidates:
            raise ValueError('malformed MAP allocation: its best split is '
                             'not among its candidates')
        return allocation


def format_candidates(candidates: Sequence[Candidate],
                      best: Optional[Candidate] = None,
                      extra: Optional[Mapping[str, Sequence[str]]] = None
                      ) -> str:
    """Fixed-width table of candidates; ``extra`` adds columns (header ->
    pre-formatted cells)."""
    extra = dict(extra or {})
    header = (f'  {"n_attn":>6} {"n_act":>5} {"a":>6} {"t":>6} '
              f'{"predicted":>9} {"extrapolated":>12}')
    header += ''.join(f' {name:>{max(9, len(name))}}' for name in extra)
    lines = [header]
    for row, c in enumerate(candidates):
        mark = '*' if c == best else ' '
        line = (f'{mark} {c.n_attn:>6} {c.n_act:>5} {c.a:>6.3f} {c.t:>6.3f} '
                f'{c.predicted_accuracy:>9.3f} '
                f'{"yes" if c.extrapolated else "no":>12}')
        line += ''.join(f' {cells[row]:>{max(9, len(name))}}'
                        for name, cells in extra.items())
        lines.append(line)
    return '\n'.join(lines)


def allocate(fit: MAPFit, budget: int, depth: int,
             bounds: Bounds = 'full') -> Allocation:
    """Split ``budget`` removed layers into ``(n_attn, n_act)``.

    Searches ``{n_attn + n_act = budget, lo <= n_attn, n_act <= hi}`` (see
    :func:`resolve_bounds`) and returns the maximiser of the predicted
    accuracy together with the whole candidate table. Candidates outside the
    fitted points' convex hull are flagged ``extrapolated`` but still count.
    """
    depth = check_depth(depth)
    budget = as_int(budget, 'budget')
    if budget < 0:
        raise ValueError(f'budget must be >= 0 removed layers, got {budget}')
    if budget > 2 * depth:
        raise ValueError(f'budget {budget} exceeds the {2 * depth} removable '
                         f'layers at depth {depth} (attention + GELU)')
    lo, hi = resolve_bounds(bounds, depth)
    n_attn_range = range(max(lo, budget - hi), min(hi, budget - lo) + 1)
    if not n_attn_range:
        raise ValueError(
            f'no feasible allocation of budget {budget} with each count in '
            f'[{lo}, {hi}] at depth {depth}: the budget must be between '
            f'{2 * lo} and {2 * hi}')
    candidates = evaluate_candidates(
        fit, depth, [(n, budget - n) for n in n_attn_range])
    best = max(candidates, key=lambda c: c.predicted_accuracy)
    return Allocation(budget=budget, depth=depth, bounds=(lo, hi), best=best,
                      candidates=tuple(candidates))


def rank_across_types(scores: Mapping[str, Sequence[float]],
                      budget: int) -> Dict[str, List[int]]:
    """The naive allocation HetDPT argues against (METHOD.md §2): the
    ``budget`` layers with the lowest raw importance scores, attention and
    GELU layers ranked together as if their scales were comparable (ties:
    GELU first, then the lower block).  ``scores`` maps each kind to the
    scores of its layers by block; returns the removed blocks per kind."""
    ranked = sorted((score, kind != ACT, index, kind)
                    for kind in LAYER_KINDS
                    for index, score in enumerate(scores.get(kind, ())))
    if not 0 <= budget <= len(ranked):
        raise ValueError(f'budget must be in 0..{len(ranked)}, got {budget}')
    removed = {kind: [] for kind in LAYER_KINDS}
    for *_, index, kind in ranked[:budget]:
        removed[kind].append(index)
    return {kind: sorted(blocks) for kind, blocks in removed.items()}

