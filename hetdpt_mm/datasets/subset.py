"""Fixed, seeded subsets of a dataset: the fast fine-tune of MAP collection
trains on one (:class:`SubsetSampler`), and the transfer-entropy score is
computed on one (:func:`select_subset`)."""

import numbers
from typing import List, Optional, Union

import numpy as np
from mmengine.dataset import DefaultSampler
from mmengine.registry import DATA_SAMPLERS

__all__ = ['select_subset', 'SubsetSampler']


def select_subset(
    length: int, subset: Union[int, float], seed: int = 0
) -> List[int]:
    """Sorted indices of a deterministic random subset of ``range(length)``.

    An ``int`` subset is a count (``1..length``), a ``float`` a fraction in
    ``(0, 1]`` (rounded, at least one item).  The same ``seed`` always picks
    the same items, on every rank and after a resume.
    """
    if isinstance(subset, bool) or not isinstance(subset, numbers.Real):
        raise TypeError(f'subset must be a count or a fraction: {subset!r}')
    if isinstance(subset, numbers.Integral):
        count = int(subset)
    else:
        count = max(1, round(subset * length)) if 0 < subset <= 1 else 0
    if not 1 <= count <= length:
        raise ValueError(f'subset {subset} is not 1..{length} or in (0, 1]')
    order = np.random.default_rng(seed).permutation(length)[:count]
    return sorted(int(i) for i in order)


@DATA_SAMPLERS.register_module()
class SubsetSampler(DefaultSampler):
    """:class:`DefaultSampler` over a fixed subset of the dataset.

    The subset is :func:`select_subset` ``(len(dataset), subset,
    subset_seed)``: the same items in every epoch and after a resume; only
    their order changes (``shuffle``, ``seed`` as in DefaultSampler).  Epochs
    get shorter accordingly.  Use it as ``train_dataloader.sampler`` for the
    fast fine-tune of MAP collection: ``dict(type='SubsetSampler',
    subset=0.5)``.
    """

    def __init__(
        self,
        dataset,
        subset: Union[int, float],
        subset_seed: int = 0,
        shuffle: bool = True,
        seed: Optional[int] = None,
        round_up: bool = True,
    ) -> None:
        self.subset_indices = select_subset(len(dataset), subset, subset_seed)
        # DefaultSampler shuffles and shards positions in the subset.
        super().__init__(
            self.subset_indices, shuffle=shuffle, seed=seed, round_up=round_up
        )

    def __iter__(self):
        return (
            self.subset_indices[position] for position in super().__iter__()
        )
