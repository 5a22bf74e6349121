"""The HetDPT record of the model in ``checkpoint['meta']['hetdpt']``.

Every HetDPT backbone already saves its record with its weights (its extra
state, see :mod:`hetdpt_mm.models.family`), whatever runner saves it, and
loaders read it from there.  :class:`HetDPTMetaHook` also copies the main
backbone's record into the checkpoint's meta, where people and meta-reading
tools look; :class:`~.prune_hook.HetDPTPruneHook` is a subclass and adds its
schedule state.
"""

from mmengine.hooks import Hook
from mmengine.registry import HOOKS

from ..models.lookup import hetdpt_record
from ..spec import META_KEY
from .ema_structure import follow_structure_in_ema


@HOOKS.register_module()
class HetDPTMetaHook(Hook):
    """Write the model's HetDPT record into every checkpoint's meta."""

    priority = 'NORMAL'

    def before_train(self, runner) -> None:
        follow_structure_in_ema(runner)  # loading may have rebuilt it

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        record = hetdpt_record(runner.model)
        if record is not None:
            checkpoint.setdefault('meta', {})[META_KEY] = record
