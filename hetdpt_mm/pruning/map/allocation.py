"""Splitting a budget of removed layers between attention and GELU layers
(or FFN branches: the kind MAP's ``t`` counts, ``MAPFit.t_kind``) by
maximising the MAP fit, and the latency-aware searches over every count
pair against a speedup or accuracy target under a cost model
(:mod:`hetdpt_mm.pruning.cost`)."""

import itertools
from dataclasses import dataclass
from operator import attrgetter
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

from ...fileio import read_json_file
from ...spec import ACT, ATTN
from ..cost import CostModel
from ..validation import as_int, check_depth
from .fit import MAPFit, check_t_kind

Bounds = Union[str, Tuple[int, int]]


@dataclass(frozen=True)
class Candidate:
    """A split of removed layers with MAP's prediction; ``n_act`` counts
    the kind the fit's ``t`` counts (GELUs or FFN branches)."""

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
    named = {'full': (0, depth), 'paper': (1, depth - 1)}
    # An unknown name gets the empty range (1, 0), refused below.
    lo, hi = named.get(bounds, (1, 0)) if isinstance(bounds, str) else bounds
    lo, hi = as_int(lo, 'lower bound'), as_int(hi, 'upper bound')
    if not 0 <= lo <= hi <= depth:
        raise ValueError(
            f'bounds {bounds!r}: "full", "paper" or (lo, hi) in 0..{depth}'
        )
    return lo, hi


def evaluate_candidates(
    fit: MAPFit, depth: int, pairs: Iterable[Tuple[int, int]]
) -> List[Candidate]:
    """MAP's prediction for each ``(n_attn, n_act)`` pair."""
    counts = np.array(list(pairs), dtype=int).reshape(-1, 2)
    a, t = ((depth - counts) / depth).T
    rows = zip(
        counts.tolist(), a, t, fit.predict(a, t), fit.in_data_hull(a, t)
    )
    return [
        Candidate(n_attn, n_act, float(ai), float(ti), float(p), not ok)
        for (n_attn, n_act), ai, ti, p, ok in rows
    ]


@dataclass(frozen=True)
class Allocation:
    """MAP's split of a budget: ``best`` maximises the predicted accuracy
    over ``candidates`` (the first on ties)."""

    budget: int
    depth: int
    bounds: Tuple[int, int]
    best: Candidate
    candidates: Tuple[Candidate, ...]
    t_kind: str = ACT

    @property
    def n_attn(self) -> int:
        return self.best.n_attn

    @property
    def n_act(self) -> int:
        return self.best.n_act

    def format_table(self) -> str:
        return format_candidates(
            self.candidates, self.best, t_kind=self.t_kind
        )

    def to_dict(self) -> Dict[str, Any]:
        """JSON form for :meth:`from_dict`; with FFN branches the second
        count is ``n_ffn`` and ``t_kind`` is written."""
        data = dict(
            budget=self.budget,
            depth=self.depth,
            bounds=list(self.bounds),
            best=_candidate_dict(self.best, self.t_kind),
            candidates=[
                _candidate_dict(c, self.t_kind) for c in self.candidates
            ],
        )
        if self.t_kind != ACT:
            data['t_kind'] = self.t_kind
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> 'Allocation':
        """The allocation :meth:`to_dict` saved; ``ValueError`` if
        malformed."""
        try:
            lo, hi = data['bounds']
            t_kind = check_t_kind(data.get('t_kind', ACT))
            allocation = cls(
                budget=as_int(data['budget'], 'budget'),
                depth=as_int(data['depth'], 'depth'),
                bounds=(as_int(lo, 'lower bound'), as_int(hi, 'upper bound')),
                best=_candidate_from_dict(data['best'], t_kind),
                candidates=tuple(
                    _candidate_from_dict(c, t_kind) for c in data['candidates']
                ),
                t_kind=t_kind,
            )
            if allocation.best not in allocation.candidates:
                raise ValueError('the best split is not a candidate')
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f'malformed MAP allocation: {err!r}') from None
        return allocation


def load_allocation(path, bounds: str) -> Allocation:
    """The allocation for ``bounds`` that ``tools/fit_map.py
    --save-allocation`` wrote."""
    saved = read_json_file(path, 'saved allocation')
    if bounds not in saved:
        raise ValueError(f'{path} has no allocation for bounds {bounds!r}')
    return Allocation.from_dict(saved[bounds])


def count_name(t_kind: str) -> str:
    """The name of a split's second count (``n_act`` or ``n_ffn``)."""
    return f'n_{t_kind}'


def _candidate_dict(candidate: Candidate, t_kind: str) -> Dict[str, Any]:
    return {
        count_name(t_kind) if name == 'n_act' else name: value
        for name, value in vars(candidate).items()
    }


def _candidate_from_dict(data: Mapping[str, Any], t_kind: str) -> Candidate:
    second = count_name(t_kind)
    if 'n_act' in data and second != 'n_act':
        raise ValueError(f'a candidate gives n_act, but t counts {t_kind}')
    return Candidate(
        **{
            'n_act' if name == second else name: value
            for name, value in data.items()
        }
    )


def format_candidates(
    candidates: Sequence[Candidate],
    best: Optional[Candidate] = None,
    extra: Optional[Mapping[str, Sequence[str]]] = None,
    t_kind: str = ACT,
) -> str:
    """Fixed-width table; ``extra`` adds columns (header -> cells)."""
    extra = dict(extra or {})
    header = (
        f'  {"n_attn":>6} {count_name(t_kind):>5} {"a":>6} {"t":>6} '
        f'{"predicted":>9} {"extrapolated":>12}'
    )
    header += ''.join(f' {name:>{max(9, len(name))}}' for name in extra)
    lines = [header]
    for row, c in enumerate(candidates):
        mark = '*' if c == best else ' '
        line = (
            f'{mark} {c.n_attn:>6} {c.n_act:>5} {c.a:>6.3f} {c.t:>6.3f} '
            f'{c.predicted_accuracy:>9.3f} '
            f'{"yes" if c.extrapolated else "no":>12}'
        )
        line += ''.join(
            f' {cells[row]:>{max(9, len(name))}}'
            for name, cells in extra.items()
        )
        lines.append(line)
    return '\n'.join(lines)


def allocate(
    fit: MAPFit, budget: int, depth: int, bounds: Bounds = 'full'
) -> Allocation:
    """MAP's split of ``budget`` removed layers, each count in ``bounds``;
    extrapolated candidates count too (they are flagged)."""
    depth = check_depth(depth)
    budget = as_int(budget, 'budget')
    lo, hi = resolve_bounds(bounds, depth)
    if not 2 * lo <= budget <= 2 * hi:
        raise ValueError(f'budget {budget} is outside {2 * lo}..{2 * hi}')
    n_attn_range = range(max(lo, budget - hi), min(hi, budget - lo) + 1)
    candidates = evaluate_candidates(
        fit, depth, [(n, budget - n) for n in n_attn_range]
    )
    best = max(candidates, key=lambda c: c.predicted_accuracy)
    return Allocation(
        budget=budget,
        depth=depth,
        bounds=(lo, hi),
        best=best,
        candidates=tuple(candidates),
        t_kind=fit.t_kind,
    )


def rank_across_types(
    scores: Mapping[str, Sequence[float]], budget: int
) -> Dict[str, List[int]]:
    """The naive allocation HetDPT argues against (docs/method.md §2): the
    ``budget`` lowest raw scores, attention and GELU ranked together as if
    comparable (ties: GELU, then the lower block); removed blocks by kind."""
    ranked = sorted(
        (score, kind != ACT, index, kind)
        for kind in (ATTN, ACT)
        for index, score in enumerate(scores.get(kind, ()))
    )
    if not 0 <= budget <= len(ranked):
        raise ValueError(f'budget must be in 0..{len(ranked)}, got {budget}')
    removed = {kind: [] for kind in (ATTN, ACT)}
    for *_, index, kind in ranked[:budget]:
        removed[kind].append(index)
    return {kind: sorted(blocks) for kind, blocks in removed.items()}


@dataclass(frozen=True)
class CostCandidate(Candidate):
    """A :class:`Candidate` with its speedup under a cost model."""

    speedup: float


@dataclass(frozen=True)
class CostAllocation:
    """A latency-aware search: ``best`` among the ``feasible`` candidates."""

    objective: str
    best: CostCandidate
    feasible: Tuple[CostCandidate, ...]
    candidates: Tuple[CostCandidate, ...]


def evaluate_cost_candidates(
    fit: MAPFit, depth: int, cost: CostModel, bounds: Bounds = 'full'
) -> List[CostCandidate]:
    """Every ``(n_attn, n_act)`` in ``bounds`` with its speedup."""
    depth = check_depth(depth)
    if cost.depth is not None and cost.depth != depth:
        raise ValueError(f'cost model is for depth {cost.depth}, not {depth}')
    lo, hi = resolve_bounds(bounds, depth)
    pairs = itertools.product(range(lo, hi + 1), repeat=2)
    return [
        CostCandidate(
            **vars(c),
            speedup=cost.split_speedup(c.n_attn, c.n_act, fit.t_kind),
        )
        for c in evaluate_candidates(fit, depth, pairs)
    ]


def pareto_front(candidates: Sequence[CostCandidate]) -> List[CostCandidate]:
    """The candidates no other beats in both speedup and predicted
    accuracy, by increasing speedup."""
    front: List[CostCandidate] = []
    for c in sorted(
        candidates, key=lambda c: (-c.predicted_accuracy, -c.speedup)
    ):
        if not front or c.speedup > front[-1].speedup:
            front.append(c)
    return sorted(front, key=lambda c: c.speedup)


def allocate_for_speedup(
    fit: MAPFit,
    depth: int,
    cost: CostModel,
    target_speedup: float,
    bounds: Bounds = 'full',
) -> CostAllocation:
    """Maximise predicted accuracy over all count pairs (any total) whose
    speedup is at least ``target_speedup``; ties go to the faster one."""
    if not target_speedup > 0:
        raise ValueError(f'target speedup must be > 0, got {target_speedup}')
    target = float(target_speedup)
    return _best_reaching(
        fit,
        depth,
        cost,
        bounds,
        'speedup',
        # A relative slack keeps exact ratios (e.g. 1.5 hit exactly) feasible.
        target * (1 - 1e-12),
        f'max predicted accuracy with speedup >= {target:g}x',
        f'reaches a {target:g}x speedup',
        'the fastest is {:.3f}x',
    )


def allocate_for_accuracy(
    fit: MAPFit,
    depth: int,
    cost: CostModel,
    min_accuracy: float,
    bounds: Bounds = 'full',
) -> CostAllocation:
    """Maximise speedup over all count pairs whose predicted accuracy is at
    least ``min_accuracy``; ties go to the more accurate one."""
    return _best_reaching(
        fit,
        depth,
        cost,
        bounds,
        'predicted_accuracy',
        min_accuracy,
        f'max speedup with predicted accuracy >= {min_accuracy:g}',
        f'is predicted to reach accuracy {min_accuracy:g}',
        'the highest prediction is {:.3f}',
    )


def _best_reaching(
    fit: MAPFit,
    depth: int,
    cost: CostModel,
    bounds: Bounds,
    constrained: str,
    threshold: float,
    objective: str,
    goal: str,
    closest: str,
) -> CostAllocation:
    """The best by the other value of the pairs whose ``constrained``
    value reaches ``threshold``; none: an error naming the closest."""
    maximised = 'predicted_accuracy' if constrained == 'speedup' else 'speedup'
    candidates = evaluate_cost_candidates(fit, depth, cost, bounds)
    feasible = [c for c in candidates if getattr(c, constrained) >= threshold]
    if not feasible:
        top = max(getattr(c, constrained) for c in candidates)
        raise ValueError(f'no allocation {goal}; {closest.format(top)}')
    best = max(feasible, key=attrgetter(maximised, constrained))
    return CostAllocation(
        objective=objective,
        best=best,
        feasible=tuple(feasible),
        candidates=tuple(candidates),
    )


def smallest_budget_reaching(
    fit: MAPFit,
    depth: int,
    cost: CostModel,
    target: float,
    bounds: Bounds = 'full',
) -> Optional[Candidate]:
    """The paper's procedure for a speedup target: raise the layer budget
    until MAP's split of it is fast enough (``None``: no budget is)."""
    lo, hi = resolve_bounds(bounds, depth)
    for budget in range(2 * lo, 2 * hi + 1):
        best = allocate(fit, budget, depth, bounds).best
        if cost.split_speedup(
            best.n_attn, best.n_act, fit.t_kind
        ) >= target * (1 - 1e-12):
            return best
    return None
