from .demo_data import (DIGIT_CLASSES, SEG_CLASSES, SHAPE_CLASSES,
                        make_all, make_classification, make_detection,
                        make_segmentation)
from .subset import SubsetSampler, select_subset

__all__ = ['DIGIT_CLASSES', 'SEG_CLASSES', 'SHAPE_CLASSES', 'make_all',
           'make_classification', 'make_detection', 'make_segmentation',
           'SubsetSampler', 'select_subset']
