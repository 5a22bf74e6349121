"""The HetDPT record of the model in ``checkpoint['meta']['hetdpt']``.

Every HetDPT backbone already saves its record with its weights (its extra
state, see :mod:`hetdpt_mm.models.family`), whatever runner saves it, and
loaders read it from there.  :class:`HetDPTMetaHook` also copies the main
backbone's record into the checkpoint's meta, where people and meta-reading
tools look; :class:`~.prune_hook.HetDPTPruneHook` is a subclass and adds its
schedule state.
"""
from typing import Dict, List, Optional, Tuple

import torch.nn as nn
from mmengine.hooks import Hook
from mmengine.model import is_model_wrapper
from mmengine.registry import HOOKS

from ..models import HetDPTBackbone
from ..spec import META_KEY

#: Attribute under which a distillation classifier keeps its frozen teacher;
#: backbones inside it are not the model being trained or saved.
TEACHER_ATTR = 'teacher'


def unwrap_model(model: nn.Module) -> nn.Module:
    """The model inside a DDP (or other MMEngine) wrapper."""
    return model.module if is_model_wrapper(model) else model


def find_hetdpt_backbones(
        model: nn.Module) -> List[Tuple[str, HetDPTBackbone]]:
    """``(state-dict prefix, backbone)`` of every HetDPT backbone of the trained
    model (a distillation teacher's are left out), e.g. ``('backbone.', m)``.
    """
    model = unwrap_model(model)
    teacher = getattr(model, TEACHER_ATTR, None)
    skipped = {id(m) for m in teacher.modules()} if isinstance(
        teacher, nn.Module) else set()
    return [(f'{name}.' if name else '', module)
            for name, module in model.named_modules()
            if isinstance(module, HetDPTBackbone) and
            id(module) not in skipped]


def hetdpt_record(model: nn.Module,
                  form: Optional[str] = None) -> Optional[Dict]:
    """The ``meta['hetdpt']`` record of a model: the main backbone's
    record (the one under ``backbone.`` if there are several) with its
    state-dict ``prefix``; ``None`` when the model has no HetDPT backbone.

    A model with several HetDPTViTs also lists all of them under
    ``backbones`` (prefix -> record).
    """
    backbones = find_hetdpt_backbones(model)
    if not backbones:
        return None
    prefixes = [prefix for prefix, _ in backbones]
    main = prefixes.index('backbone.') if 'backbone.' in prefixes else 0
    prefix, backbone = backbones[main]
    record = dict(backbone.record(form).to_dict(), prefix=prefix)
    teacher = getattr(unwrap_model(model), TEACHER_ATTR, None)
    if isinstance(teacher, nn.Module):
        record['teacher_prefix'] = f'{TEACHER_ATTR}.'
    if len(backbones) > 1:
        record['backbones'] = {p: dict(b.record(form).to_dict(), prefix=p)
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
