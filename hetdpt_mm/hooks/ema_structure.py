"""MMEngine's EMAHook in a run whose structure changes: its averaged model
follows the trained one's HetDPT backbones (docs/user_guides/pruning.md,
*MergeCheckpointHook*).

The averaged model is a copy taken in ``before_run``, before the weights
load (which may rebuild a backbone to the checkpoint's structure), and
mmengine copies buffers into it with ``.data.copy_``, which closes a gate's
buffer without its flag (what the forward pass and the record read).  So
HetDPTMetaHook, HetDPTPruneHook and MergeCheckpointHook call
:func:`follow_structure_in_ema` before training, HetDPTPruneHook after each
removal, MergeCheckpointHook before writing.
"""

import copy
from typing import Optional

from mmengine.hooks import EMAHook

from ..models.lookup import find_hetdpt_backbones


def ema_hook_of(runner) -> Optional[EMAHook]:
    """The run's EMAHook once it has built its averaged model, or None."""
    return next(
        (
            hook
            for hook in getattr(runner, 'hooks', ())
            if isinstance(hook, EMAHook) and hasattr(hook, 'ema_model')
        ),
        None,
    )


def follow_structure_in_ema(runner) -> None:
    """Give the averaged model of the run's EMAHook (if any) the structure
    of the trained model's HetDPT backbones: a gated one's gates are set
    to the trained spec (the averaged weights stay), another structure is
    a copy of the trained backbone (as EMAHook starts from its weights);
    then the averaged parameters are the module's own."""
    hook = ema_hook_of(runner)
    if hook is None:
        return
    averaged = hook.ema_model
    trained = dict(find_hetdpt_backbones(hook.src_model))
    for prefix, backbone in find_hetdpt_backbones(averaged.module):
        source = trained.get(prefix)
        if source is None or backbone.record() == source.record():
            continue
        if backbone.record().same_structure(source.record()):
            backbone.set_spec(source.prune_spec)  # gated: gates only
        elif not prefix:
            averaged.module = copy.deepcopy(source).requires_grad_(False)
        else:
            parent, _, name = prefix[:-1].rpartition('.')
            setattr(
                averaged.module.get_submodule(parent),
                name,
                copy.deepcopy(source).requires_grad_(False),
            )
    # What ExponentialMovingAverage averages: the module's tensors (a
    # backbone rebuilt on loading has new ones).
    averaged.avg_parameters = (
        averaged.module.state_dict()
        if averaged.update_buffers
        else dict(averaged.module.named_parameters())
    )
