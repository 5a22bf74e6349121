from .demo_data import (
    DIGIT_CLASSES,
    PAIR_CLASSES,
    SEG_CLASSES,
    SHAPE_CLASSES,
    SHAPE_PAIR_CLASSES,
    SHAPES_TASK,
    make_all,
    make_classification,
    make_detection,
    make_pairs,
    make_segmentation,
)
from .subset import SubsetSampler, select_subset

__all__ = [
    'DIGIT_CLASSES',
    'PAIR_CLASSES',
    'SEG_CLASSES',
    'SHAPE_CLASSES',
    'SHAPE_PAIR_CLASSES',
    'SHAPES_TASK',
    'make_all',
    'make_classification',
    'make_detection',
    'make_pairs',
    'make_segmentation',
    'SubsetSampler',
    'select_subset',
]
