"""The MAP polynomial fit, its degree chosen by leave-2-out CV."""

import functools
import math
import operator
from dataclasses import dataclass
from functools import cached_property
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

from ...spec import ACT
from ..validation import as_int
from .points import T_KINDS, MAPPoint

# A candidate this close to the data's convex hull counts as inside it.
HULL_TOLERANCE = 1e-9
#: Leave-2-out CV fits n(n-1)/2 folds (in closed form, but still O(n^2)
#: memory and time): 2,000 distinct points are about 2 million folds.
MAX_CV_POINTS = 2000
FIT_FORMAT = 'hetdpt_mm.map_fit'
FIT_FORMAT_VERSION = 1


def polynomial_terms(degree: int, axes: int = 2) -> List[Tuple[int, ...]]:
    """Exponents of the monomials of ``axes`` variables up to ``degree``,
    by total degree, then by decreasing power of the first variable, then
    of the second, ...: two variables give ``(i, j)`` of ``a^i t^j``."""
    return [
        term for total in range(degree + 1) for term in _exponents(total, axes)
    ]


def _exponents(total: int, axes: int) -> List[Tuple[int, ...]]:
    if axes == 1:
        return [(total,)]
    return [
        (first, *rest)
        for first in range(total, -1, -1)
        for rest in _exponents(total - first, axes - 1)
    ]


def term_name(powers: Sequence[int], names: Sequence[str] = ('a', 't')) -> str:
    """``'1'``, ``'a'``, ``'a^2*t'``, ... (``names``: the variables)."""
    factors = [
        name if power == 1 else f'{name}^{power}'
        for name, power in zip(names, powers)
        if power
    ]
    return '*'.join(factors) or '1'


def monomials(
    columns: Sequence[np.ndarray], terms: Sequence[Tuple[int, ...]]
) -> np.ndarray:
    """The design matrix: each term's product of powers of ``columns``."""
    return np.stack(
        [
            functools.reduce(
                operator.mul, (c**e for c, e in zip(columns, term))
            )
            for term in terms
        ],
        axis=-1,
    )


def _design_matrix(
    a: np.ndarray, t: np.ndarray, terms: Sequence[Tuple[int, int]]
) -> np.ndarray:
    return monomials((a, t), terms)


def _broadcast(a, t) -> Sequence[np.ndarray]:
    return np.broadcast_arrays(np.asarray(a, float), np.asarray(t, float))


@dataclass(frozen=True)
class DegreeScore:
    """Leave-2-out CV of one degree; ``rank_deficient_folds`` counts folds
    fitted by numpy's minimum-norm solution, ``skipped`` says why a degree
    was not fitted."""

    degree: int
    n_terms: int
    cv_mae: Optional[float] = None
    cv_rmse: Optional[float] = None
    train_rmse: Optional[float] = None
    rank_deficient_folds: int = 0
    skipped: Optional[str] = None


def _leave_two_out(X: np.ndarray, y: np.ndarray) -> Tuple[np.ndarray, int]:
    """Each point's mean prediction over the ``n - 1`` folds holding it out
    with one other point, and the number of rank-deficient folds.  Closed
    form, from the full fit's hat matrix ``H`` and residuals ``r``: the
    errors on a held-out pair ``S`` are ``(I - H_SS)^-1 r_S``."""
    n = len(y)
    basis = np.linalg.qr(X)[0]  # X has full column rank (_score_degree)
    hat = basis @ basis.T
    residual = y - hat @ y
    pairs = np.stack(np.triu_indices(n, 1), axis=1)
    blocks = np.eye(2) - hat[pairs[:, :, None], pairs[:, None, :]]
    # Near a singular block the closed form loses its precision (a fold of
    # the paper's points at degree 3 has det 4e-10): such folds are refitted,
    # and lstsq's rank says whether they are deficient.
    direct = np.abs(np.linalg.det(blocks)) < 1e-6
    blocks[direct] = np.eye(2)
    errors = np.linalg.solve(blocks, residual[pairs][..., None])[..., 0]
    rank_deficient = 0
    for fold in np.flatnonzero(direct):
        train = np.ones(n, dtype=bool)
        train[pairs[fold]] = False
        theta, _, rank, _ = np.linalg.lstsq(X[train], y[train], rcond=None)
        rank_deficient += rank < X.shape[1]
        errors[fold] = y[pairs[fold]] - X[pairs[fold]] @ theta
    predictions = np.bincount(pairs.ravel(), (y[pairs] - errors).ravel(), n)
    return predictions / (n - 1), rank_deficient


def _average_duplicates(points: Iterable[MAPPoint]) -> Tuple[MAPPoint, ...]:
    """One point per ``(a, t)`` with the mean accuracy of its repeats: they
    would weigh a split several times, and a leave-2-out fold would train
    on the twin of a held-out point."""
    groups: Dict[Tuple[float, float], List[float]] = {}
    for point in points:
        groups.setdefault((point.a, point.t), []).append(point.accuracy)
    return tuple(
        MAPPoint(a, t, float(np.mean(accuracies)))
        for (a, t), accuracies in groups.items()
    )


def _score_degree(
    degree: int, columns: Sequence[np.ndarray], y: np.ndarray
) -> Tuple[DegreeScore, Optional[np.ndarray]]:
    terms, n = polynomial_terms(degree, len(columns)), len(y)
    if len(terms) > n - 2:
        skipped = f'{len(terms)} terms > {n - 2} points per training fold'
        return DegreeScore(degree, len(terms), skipped=skipped), None
    X = monomials(columns, terms)
    theta, _, rank, _ = np.linalg.lstsq(X, y, rcond=None)
    # Without full rank the points do not determine the polynomial: the
    # coefficients, and predictions away from the points, would be arbitrary.
    if rank < len(terms):
        skipped = (
            f'rank-deficient: the points determine only {rank} of '
            f'{len(terms)} coefficients'
        )
        return DegreeScore(degree, len(terms), skipped=skipped), None
    cv_prediction, rank_deficient_folds = _leave_two_out(X, y)
    cv_error = cv_prediction - y
    score = DegreeScore(
        degree,
        len(terms),
        cv_mae=float(np.mean(np.abs(cv_error))),
        cv_rmse=float(np.sqrt(np.mean(cv_error**2))),
        train_rmse=float(np.sqrt(np.mean((X @ theta - y) ** 2))),
        rank_deficient_folds=int(rank_deficient_folds),
    )
    return score, theta


def fit_degrees(
    columns: Sequence[np.ndarray],
    y: np.ndarray,
    degrees: Iterable[int],
    what: str = '(a, t)',
) -> Tuple[int, Tuple[float, ...], Tuple[DegreeScore, ...]]:
    """Least squares of ``y`` on the monomials of ``columns`` (one array
    per variable, one value per distinct point) at the degree of lowest
    leave-2-out CV RMSE (ties: the lower): ``(degree, coefficients,
    scores)``; ``what`` names a point's variables in errors."""
    degrees = _check_degrees(degrees)
    n = len(y)
    if n > MAX_CV_POINTS:
        raise ValueError(
            f'{n} distinct {what} points: CV is capped at {MAX_CV_POINTS}'
        )
    # Leave-2-out CV trains each fold on n - 2 points.
    needed = len(polynomial_terms(degrees[0], len(columns))) + 2
    if n < needed:
        raise ValueError(
            f'degree {degrees[0]} needs {needed} points, got {n} distinct'
        )
    scores, coefficients = [], {}
    for degree in degrees:
        score, theta = _score_degree(degree, columns, y)
        scores.append(score)
        if theta is not None:
            coefficients[degree] = theta
    if not coefficients:
        reasons = '; '.join(f'degree {s.degree}: {s.skipped}' for s in scores)
        raise ValueError(f'no degree fits the {n} points: {reasons}')
    chosen = min(
        (s for s in scores if s.skipped is None), key=lambda s: s.cv_rmse
    )
    return (
        chosen.degree,
        tuple(map(float, coefficients[chosen.degree])),
        tuple(scores),
    )


def fit_map(
    points: Iterable[Union[MAPPoint, Sequence[float]]],
    degrees: Iterable[int] = (1, 2, 3, 4),
    t_kind: str = ACT,
) -> 'MAPFit':
    """Least squares over the checked points (:func:`load_points_and_kind`
    or ``(a, t, accuracy)`` tuples), at the degree of lowest leave-2-out CV
    RMSE (ties: the lower); repeats of an ``(a, t)`` are averaged first."""
    points = _average_duplicates(
        p if isinstance(p, MAPPoint) else MAPPoint(*map(float, p))
        for p in points
    )
    a, t, y = np.array([(p.a, p.t, p.accuracy) for p in points], float).T
    degree, coefficients, scores = fit_degrees((a, t), y, degrees)
    return MAPFit(
        degree=degree,
        coefficients=coefficients,
        scores=scores,
        points=points,
        t_kind=t_kind,
    )


def check_t_kind(t_kind: Any) -> str:
    if t_kind not in T_KINDS:
        raise ValueError(f't_kind {t_kind!r} is not one of {T_KINDS}')
    return t_kind


def _check_degrees(degrees: Iterable[int]) -> List[int]:
    degrees = sorted({as_int(d, 'degree') for d in degrees})
    if not degrees or degrees[0] < 1:
        raise ValueError(f'degrees must be integers >= 1, got {degrees}')
    return degrees


@dataclass(frozen=True)
class MAPFit:
    """A fitted MAP: ``coefficients[i]`` multiplies ``terms[i]``; the
    ``points`` are kept to flag extrapolation; ``t`` counts GELUs kept
    (``t_kind='act'``) or FFN branches kept (``'ffn'``)."""

    degree: int
    coefficients: Tuple[float, ...]
    scores: Tuple[DegreeScore, ...]
    points: Tuple[MAPPoint, ...]
    t_kind: str = ACT

    @property
    def terms(self) -> List[Tuple[int, int]]:
        return polynomial_terms(self.degree)

    @property
    def term_names(self) -> List[str]:
        return [term_name(term) for term in self.terms]

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
        """Predicted accuracy at ``(a, t)``; broadcasts, float for scalars."""
        prediction = _design_matrix(*_broadcast(a, t), self.terms)
        prediction = prediction @ np.asarray(self.coefficients)
        return float(prediction) if prediction.ndim == 0 else prediction

    def in_data_hull(self, a, t) -> np.ndarray:
        """Whether ``(a, t)`` lies in the fitted points' convex hull, where
        the polynomial interpolates."""
        return inside_hull(self._hull, np.stack(_broadcast(a, t), -1))

    @property
    def hull_vertices(self) -> np.ndarray:
        """The hull's corners ``(a, t)``, counter-clockwise."""
        return self._hull.points[self._hull.vertices]

    @cached_property
    def _hull(self) -> ConvexHull:
        try:  # a fit of full rank spans an area; a saved one may not
            return ConvexHull([(p.a, p.t) for p in self.points])
        except QhullError:
            raise ValueError('the MAP points lie on one line') from None

    def to_dict(self) -> Dict[str, Any]:
        """JSON form for :meth:`from_dict`; a fit without ``t_kind`` counts
        GELUs."""
        data = {
            'format': FIT_FORMAT,
            'version': FIT_FORMAT_VERSION,
            'degree': self.degree,
            'terms': [
                {
                    'name': term_name((i, j)),
                    'a_power': i,
                    't_power': j,
                    'coefficient': c,
                }
                for (i, j), c in zip(self.terms, self.coefficients)
            ],
            'cv': [vars(score).copy() for score in self.scores],
            'points': [vars(point).copy() for point in self.points],
        }
        if self.t_kind != ACT:
            data['t_kind'] = self.t_kind
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> 'MAPFit':
        """The fit :meth:`to_dict` saved; ``ValueError`` if malformed."""
        try:
            written = (data.get('format'), data.get('version'))
            expected = (FIT_FORMAT, FIT_FORMAT_VERSION)
            if written != expected:
                raise ValueError(f'format {written}, not {expected}')
            degree = as_int(data['degree'], 'degree')
            terms = [(t['a_power'], t['t_power']) for t in data['terms']]
            if terms != polynomial_terms(degree):
                raise ValueError(f'terms do not match degree {degree}')
            coefficients = tuple(
                float(t['coefficient']) for t in data['terms']
            )
            if not all(map(math.isfinite, coefficients)):
                raise ValueError('coefficients must be finite')
            scores = tuple(DegreeScore(**s) for s in data['cv'])
            if not any(
                s.degree == degree and s.skipped is None for s in scores
            ):
                raise ValueError(f'the CV table has no fitted degree {degree}')
            points = tuple(MAPPoint(**p) for p in data['points'])
            fit = cls(
                degree=degree,
                coefficients=coefficients,
                scores=scores,
                points=points,
                t_kind=check_t_kind(data.get('t_kind', ACT)),
            )
            fit.hull_vertices  # noqa: B018  fails unless points span an area
        except (KeyError, TypeError, AttributeError, ValueError) as err:
            raise ValueError(f'malformed MAP fit: {err!r}') from None
        return fit

    def format_table(self) -> str:
        """The CV table over degrees, the chosen one marked with ``*``."""
        return format_cv_table(self.scores, self.degree, len(self.points))

    def format_polynomial(self) -> str:
        """``P(a, t) = c0 + c1*a + ...`` with the fitted coefficients."""
        return format_polynomial(self.coefficients, self.term_names, 'P(a, t)')


def inside_hull(hull: ConvexHull, coords: np.ndarray) -> np.ndarray:
    """Whether each point of ``coords`` (``(..., dims)``) lies in
    ``hull``: rows of its ``equations`` are unit outward normals ``n`` and
    offsets ``c`` of its facets, inside <=> ``n.x + c <= 0`` for each."""
    normals, offsets = np.split(hull.equations, [hull.ndim], axis=1)
    distances = coords @ normals.T + offsets[:, 0]
    return np.all(distances <= HULL_TOLERANCE, axis=-1)


def format_cv_table(
    scores: Sequence[DegreeScore], degree: int, n_points: int
) -> str:
    """The CV table over degrees, the chosen ``degree`` marked with ``*``."""
    lines = [
        f'{"degree":>7} {"terms":>5} {"cv_mae":>8} {"cv_rmse":>8} '
        f'{"train_rmse":>10}  note'
    ]
    n_folds = n_points * (n_points - 1) // 2
    for s in scores:
        head = f'{"*" if s.degree == degree else " "}{s.degree:>6}'
        if s.skipped:
            lines.append(
                f'{head} {s.n_terms:>5} {"-":>8} {"-":>8} {"-":>10}  '
                f'skipped: {s.skipped}'
            )
            continue
        notes = ['chosen (lowest CV RMSE)'] * (s.degree == degree)
        if s.rank_deficient_folds:
            notes.append(
                f'{s.rank_deficient_folds} of {n_folds} folds rank-deficient'
            )
        lines.append(
            f'{head} {s.n_terms:>5} {s.cv_mae:>8.4f} {s.cv_rmse:>8.4f} '
            f'{s.train_rmse:>10.4f}  {", ".join(notes)}'.rstrip()
        )
    return '\n'.join(lines)


def format_polynomial(
    coefficients: Sequence[float], names: Sequence[str], head: str
) -> str:
    """``head = c0 + c1*a + ...`` with the fitted coefficients."""
    parts = [
        f'{c:+.6g}' + ('' if name == '1' else f'*{name}')
        for c, name in zip(coefficients, names)
    ]
    return f'{head} = ' + ' '.join(parts).lstrip('+')
