"""HetDPT budget allocation: the Model Accuracy Predictor (MAP) and its
latency-aware extension."""

from .cost import ARCH_PRESETS, AnalyticCost, CostModel, MeasuredCost
from .map import *  # noqa: F403 (MAP's names, as map.__all__ lists them)
from .map import __all__ as _map_names

__all__ = [
    *_map_names,
    'ARCH_PRESETS',
    'CostModel',
    'AnalyticCost',
    'MeasuredCost',
]
