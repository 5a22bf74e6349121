"""Model Accuracy Predictor (MAP), HetDPT stage 1 step 1 (docs/method.md
section 2).

MAP predicts the fine-tuned accuracy of a depth-pruned ViT from the retained
ratios ``a`` (attention sublayers kept) and ``t`` (GELU activations kept,
or FFN branches kept with whole-branch removal: ``MAPFit.t_kind``) with
a bivariate polynomial ``P(a, t) = sum_{i+j<=k} theta_ij a^i t^j``, and
splits a budget of removed layers between the two types by maximising ``P``.

Typical use::

    points = load_points('map_points.csv', depth=12)
    fit = fit_map(points)                  # degree by leave-2-out CV
    print(fit.format_table())
    allocation = allocate(fit, budget=8, depth=12, bounds='full')
    print(allocation.format_table())
"""

from .allocation import (
    Allocation,
    Bounds,
    Candidate,
    CostAllocation,
    CostCandidate,
    allocate,
    allocate_for_accuracy,
    allocate_for_speedup,
    count_name,
    evaluate_cost_candidates,
    format_candidates,
    load_allocation,
    pareto_front,
    rank_across_types,
    resolve_bounds,
    smallest_budget_reaching,
)
from .fit import DegreeScore, MAPFit, fit_map, polynomial_terms
from .points import (
    MAPPoint,
    load_points,
    load_points_and_kind,
    parse_points,
    points_t_kind,
)
from .types import (
    TypeAllocation,
    TypeCandidate,
    TypeCost,
    TypeFit,
    TypePoint,
    allocate_types,
    allocate_types_for_speedup,
    fit_types,
    load_type_points,
)

__all__ = [
    'MAPPoint',
    'DegreeScore',
    'MAPFit',
    'Candidate',
    'Allocation',
    'load_points',
    'parse_points',
    'polynomial_terms',
    'load_points_and_kind',
    'points_t_kind',
    'count_name',
    'fit_map',
    'resolve_bounds',
    'format_candidates',
    'allocate',
    'load_allocation',
    'rank_across_types',
    'Bounds',
    'CostCandidate',
    'CostAllocation',
    'evaluate_cost_candidates',
    'pareto_front',
    'allocate_for_speedup',
    'allocate_for_accuracy',
    'smallest_budget_reaching',
    'TypePoint',
    'TypeFit',
    'TypeCost',
    'TypeCandidate',
    'TypeAllocation',
    'load_type_points',
    'fit_types',
    'allocate_types',
    'allocate_types_for_speedup',
]
