"""HetDPT budget allocation: the Model Accuracy Predictor (MAP) and its
latency-aware extension."""
from .cost import ARCH_PRESETS, AnalyticCost, CostModel, MeasuredCost
from .map import (
                   Allocation,
                   Candidate,
                   CostAllocation,
                   CostCandidate,
                   DegreeScore,
                   MAPFit,
                   MAPPoint,
                   allocate,
                   allocate_for_accuracy,
                   allocate_for_speedup,
                   evaluate_candidates,
                   evaluate_cost_candidates,
                   fit_map,
                   format_candidates,
                   load_points,
                   pareto_front,
                   parse_points,
                   polynomial_terms,
                   rank_across_types,
                   resolve_bounds,
                   smallest_budget_reaching,
                   term_name,
)

__all__ = [
    'MAPPoint', 'DegreeScore', 'MAPFit', 'Candidate', 'Allocation',
    'load_points', 'parse_points', 'polynomial_terms', 'term_name', 'fit_map',
    'resolve_bounds', 'evaluate_candidates', 'rank_across_types',
    'format_candidates', 'allocate',
    'ARCH_PRESETS', 'CostModel', 'AnalyticCost', 'MeasuredCost',
    'CostCandidate', 'CostAllocation', 'evaluate_cost_candidates',
    'pareto_front', 'allocate_for_speedup', 'allocate_for_accuracy',
    'smallest_budget_reaching',
]
