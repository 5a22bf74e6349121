"""HetDPT budget allocation: the Model Accuracy Predictor (MAP) and its
latency-aware extension."""
from .cost import (
                   ARCH_PRESETS,
                   AnalyticCost,
                   CostAllocation,
                   CostCandidate,
                   CostModel,
                   MeasuredCost,
                   allocate_for_accuracy,
                   allocate_for_speedup,
                   evaluate_cost_candidates,
                   pareto_front,
                   smallest_budget_reaching,
)
from .map import (
                   Allocation,
                   Candidate,
                   DegreeScore,
                   MAPFit,
                   MAPPoint,
                   allocate,
                   evaluate_candidates,
                   fit_map,
                   format_candidates,
                   load_points,
                   parse_points,
                   polynomial_terms,
                   rank_across_types,
                   resolve_bounds,
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
