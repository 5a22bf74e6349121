"""Width pruning of a checkpoint (HetDPT+, docs/method.md section 6): the
backbone of a file of any layout and the inputs of its classifier heads
pruned by :func:`~hetdpt_mm.pruning.width.prune_width`, written back into
the checkpoint with the record that carries the widths."""

from collections import OrderedDict
from dataclasses import replace
from typing import Dict, Mapping, Optional, Tuple

import torch
import torch.nn as nn

from ..checkpoint.reader import (
    classifier_head_prefixes,
    read_backbone_checkpoint,
    read_classifier_heads,
)
from ..checkpoint.record import EXTRA_STATE_KEY, with_record
from ..spec import META_KEY
from ..structure import build, with_arch
from .width import prune_width
from .width_result import WidthPruneResult

#: Key of the width-pruning report in a checkpoint's ``meta``.
WIDTH_META_KEY = 'hetdpt_width'


def linear_heads(
    tensors: Mapping[str, Mapping[str, torch.Tensor]],
) -> Dict[str, nn.Linear]:
    """``nn.Linear`` heads holding a checkpoint's head tensors
    (:func:`~hetdpt_mm.checkpoint.reader.read_classifier_heads`)."""
    heads = {}
    for name, params in tensors.items():
        out_features, in_features = params['weight'].shape
        head = nn.Linear(in_features, out_features, bias='bias' in params)
        head.load_state_dict(dict(params))
        heads[name] = head
    return heads


def prune_width_checkpoint(
    checkpoint: Mapping,
    prefix: Optional[str] = None,
    arch: Optional[Mapping] = None,
    source: str = 'checkpoint',
    **options,
) -> Tuple[Dict, WidthPruneResult]:
    """Width-prune the HetDPTViT backbone of a checkpoint (any layout
    :func:`~hetdpt_mm.checkpoint.reader.read_backbone_checkpoint` reads,
    merged, pruned or dense) and the inputs of its classifier heads, with
    :func:`prune_width`'s ``options``; return ``(checkpoint, result)``.

    The result is ``{'state_dict': ..., 'meta': {..., 'hetdpt': record,
    'hetdpt_width': report}}``: the backbone's tensors (with its record,
    which carries the widths) and the heads replaced in place, every other
    tensor passed through, a distillation teacher's dropped (as
    :func:`~hetdpt_mm.merge.merge_checkpoint` does).  ``checkpoint`` is not
    modified.
    """
    from ..merge import parse_arch

    loaded = read_backbone_checkpoint(checkpoint, source, prefix)
    record, state_dict = loaded.record, loaded.state_dict
    if record.form == 'gated':
        raise ValueError(f'{source} is gated: merge it (tools/merge_ckpt.py)')
    if record.act_unknown:
        raise ValueError(f'{source}: removed GELUs unknown; merge with --spec')
    family = loaded.family
    if not family.WIDTH_PRUNABLE:
        raise ValueError(
            f'{source}: no width pruning for {record.family} backbones '
            '(docs/user_guides/hetdpt_plus.md)'
        )
    record = with_arch(
        record, loaded.state, parse_arch(arch) if arch is not None else None
    )
    backbone = build(record, out_type='cls_token')
    own = backbone.state_dict()
    backbone.load_state_dict(
        with_record(
            {k: v for k, v in loaded.state.items() if k in own}, record
        )
    )

    head_prefixes = classifier_head_prefixes(state_dict)
    heads = (
        linear_heads(read_classifier_heads(checkpoint, source))
        if head_prefixes
        else {}
    )
    result = prune_width(backbone, heads, **options)

    prefix, teacher = record.prefix, record.teacher_prefix
    head_tensors = {
        head + k: v.detach()
        for name, head in head_prefixes.items()
        for k, v in result.heads[name].state_dict().items()
    }
    backbone_state = with_record(result.backbone.state_dict(), result.record)
    out_state, written = OrderedDict(), False
    for key, value in state_dict.items():
        relative = key[len(prefix) :] if key.startswith(prefix) else None
        if teacher and key.startswith(teacher):
            continue
        if key in head_tensors:
            out_state[key] = head_tensors[key]
        elif key.endswith(EXTRA_STATE_KEY) and (
            relative == EXTRA_STATE_KEY or teacher
        ):
            continue  # rewritten with the backbone, or the teacher's
        elif relative in loaded.layout_keys:
            if not written:
                out_state.update(
                    (prefix + k, v) for k, v in backbone_state.items()
                )
                written = True
        else:
            out_state[key] = value
    meta = (
        checkpoint.get('meta')
        if isinstance(checkpoint.get('meta'), Mapping)
        else {}
    )
    out_meta = {
        k: v for k, v in meta.items() if k not in (META_KEY, WIDTH_META_KEY)
    }
    out_meta[META_KEY] = replace(result.record, prefix=prefix).to_dict()
    out_meta[WIDTH_META_KEY] = result.report()
    return {'state_dict': out_state, 'meta': out_meta}, result
