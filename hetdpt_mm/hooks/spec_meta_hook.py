"""Self-describing checkpoints: the HetDPT record of every HetDPTViT in the
model goes into ``checkpoint['meta']['hetdpt']`` at each save.

tools/train.py adds :class:`HetDPTMetaHook` automatically when the model
contains a HetDPTViT (see :func:`ensure_meta_hook`), so DETR / UperNet
fine-tuning and dense runs write it too; :class:`~.prune_hook.HetDPTPruneHook`
is a subclass and writes the same record plus its schedule state.
"""
from typing import Dict, List, Optional, Tuple

import torch.nn as nn
from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper
from mmengine.registry import HOOKS

from ..models import HetDPTViT
from ..spec import META_KEY

#: Attribute under which a distillation classifier keeps its frozen teacher;
#: backbones inside it are not the model being trained or saved.
TEACHER_ATTR = 'teacher'


def unwrap_model(model: nn.Module) -> nn.Module:
    """The model inside a DDP (or other MMEngine) wrapper."""
    return model.module if is_model_wrapper(model) else model


def find_hetdpt_backbones(model: nn.Module) -> List[Tuple[str, HetDPTViT]]:
    """``(state-dict prefix, backbone)`` of every HetDPTViT of the trained
    model (a distillation teacher's are left out), e.g. ``('backbone.', m)``.
    """
    model = unwrap_model(model)
    teacher = getattr(model, TEACHER_ATTR, None)
    skipped = {id(m) for m in teacher.modules()} if isinstance(
        teacher, nn.Module) else set()
    return [(f'{name}.' if name else '', module)
            for name, module in model.named_modules()
            if isinstance(module, HetDPTViT) and id(module) not in skipped]


def hetdpt_record(model: nn.Module,
                  form: Optional[str] = None) -> Optional[Dict]:
    """The ``meta['hetdpt']`` record of a model: the main backbone's
    ``spec_meta()`` (the one under ``backbone.`` if there are several) with
    its state-dict ``prefix``; ``None`` when the model has no HetDPTViT.

    A model with several HetDPTViTs also lists all of them under
    ``backbones`` (prefix -> record).
    """
    backbones = find_hetdpt_backbones(model)
    if not backbones:
        return None
    prefixes = [prefix for prefix, _ in backbones]
    main = prefixes.index('backbone.') if 'backbone.' in prefixes else 0
    prefix, backbone = backbones[main]
    record = dict(backbone.spec_meta(form), prefix=prefix)
    teacher = getattr(unwrap_model(model), TEACHER_ATTR, None)
    if isinstance(teacher, nn.Module):
        record['teacher_prefix'] = f'{TEACHER_ATTR}.'
    if len(backbones) > 1:
        record['backbones'] = {p: dict(b.spec_meta(form), prefix=p)
                               for p, b in backbones}
    return record


@HOOKS.register_module()
class HetDPTMetaHook(Hook):
    """Write the model's HetDPT record into every checkpoint's meta."""

    priority = 'NORMAL'

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        record = hetdpt_record(runner.model)
        if record is not None:
            checkpoint.setdefault('meta', {})[META_KEY] = record


def ensure_meta_hook(runner) -> bool:
    """Register :class:`HetDPTMetaHook` on ``runner`` when its model contains
    a HetDPTViT and no hook writing the record is configured; returns
    whether one was added."""
    if any(isinstance(hook, HetDPTMetaHook) for hook in runner.hooks):
        return False
    if not find_hetdpt_backbones(runner.model):
        return False
    runner.register_hook(HetDPTMetaHook())
    return True
