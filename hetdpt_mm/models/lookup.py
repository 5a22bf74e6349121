"""The HetDPT backbones of a model, and the record a checkpoint's meta
carries for them (:class:`~hetdpt_mm.hooks.HetDPTMetaHook`)."""

from typing import Dict, List, Optional, Tuple

import torch.nn as nn

from ..sharding import unwrap_model
from .family import HetDPTBackbone

#: Attribute under which a distillation classifier keeps its frozen teacher;
#: backbones inside it are not the model being trained or saved.
TEACHER_ATTR = 'teacher'


def find_hetdpt_backbones(
    model: nn.Module,
) -> List[Tuple[str, HetDPTBackbone]]:
    """``(state-dict prefix, backbone)`` of every HetDPT backbone of the
    trained model (a distillation teacher's are left out), e.g.
    ``('backbone.', m)``."""
    model = unwrap_model(model)
    teacher = getattr(model, TEACHER_ATTR, None)
    skipped = (
        {id(m) for m in teacher.modules()}
        if isinstance(teacher, nn.Module)
        else set()
    )
    return [
        (f'{name}.' if name else '', module)
        for name, module in model.named_modules()
        if isinstance(module, HetDPTBackbone) and id(module) not in skipped
    ]


def hetdpt_record(
    model: nn.Module, form: Optional[str] = None
) -> Optional[Dict]:
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
        record['backbones'] = {
            p: dict(b.record(form).to_dict(), prefix=p) for p, b in backbones
        }
    return record
