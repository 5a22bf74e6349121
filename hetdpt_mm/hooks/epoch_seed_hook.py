"""Seed the global random generators per epoch, so that ``--resume`` is
exact with random augmentation."""

import random

import numpy as np
import torch
from mmengine.dist import get_rank
from mmengine.hooks import Hook
from mmengine.registry import HOOKS


@HOOKS.register_module()
class EpochSeedHook(Hook):
    """Seed Python's, NumPy's and torch's global generators at the start of
    each training epoch from the run's seed and the epoch number (and the
    rank, under ``randomness.diff_rank_seed``).

    MMEngine's checkpoints do not hold these generators' states, so after
    ``--resume`` random augmentation (mmpretrain's ``RandomCrop`` draws from
    NumPy), drop path and data-loader worker seeds would differ from the
    run that was interrupted.  Seeded from its number, an epoch draws the
    same numbers whichever process runs it.  Exact for ``num_workers=0`` and
    for workers that are restarted each epoch (not ``persistent_workers``,
    whose generators carry over from epoch to epoch).

    Our configs name it in ``default_hooks`` (as ``epoch_seed``), so that
    any runner gets it (mmdet's / mmseg's own ``tools/train.py``, ``mim
    train``); ``tools/train.py`` adds it to configs that do not.
    """

    priority = 'VERY_HIGH'

    def before_train_epoch(self, runner) -> None:
        entropy = [runner.seed, runner.epoch]
        if (runner.cfg.get('randomness') or {}).get('diff_rank_seed'):
            entropy.append(get_rank())
        low, high = np.random.SeedSequence(entropy).generate_state(2)
        random.seed(int(low) << 32 | int(high))
        np.random.seed(int(low))
        torch.manual_seed(int(low) << 32 | int(high))
