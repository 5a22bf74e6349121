from .subset import SubsetSampler, select_subset

__all__ = ['SubsetSampler', 'select_subset']
