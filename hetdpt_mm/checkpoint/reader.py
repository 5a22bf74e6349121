"""Reading a checkpoint of any supported layout: its HetDPT backbone, its
record checked against its tensors, and its linear classifier heads
(docs/advanced/checkpoint_record.md)."""

import os
from dataclasses import dataclass, replace
from typing import Any, Dict, Mapping, Optional, Union

import torch

from ..errors import CheckpointError
from ..registry import FAMILIES, get_family, recognising_family
from ..spec import META_KEY
from ..structure import read_tensors, verify
from .record import HetDPTRecord, records_in
from .safe_load import EXTRA_STATE_KEY, load_checkpoint_file, source_of


@dataclass
class BackboneCheckpoint:
    """A checkpoint's HetDPT backbone: ``state`` relative to it in the
    family's own layout, the whole ``state_dict``, and ``layout_keys``, the
    backbone's relative keys as the file names them."""

    record: HetDPTRecord
    state: Dict[str, Any]
    state_dict: Mapping[str, Any]
    layout_keys: frozenset

    @property
    def family(self):
        return get_family(self.record.family)


def unwrap_state_dict(checkpoint: Mapping) -> Mapping:
    """The state dict of an MMEngine, DeiT / timm or bare checkpoint."""
    for key in ('state_dict', 'model'):
        if isinstance(checkpoint.get(key), Mapping):
            return checkpoint[key]
    return checkpoint


def _choose_prefix(
    state_dict: Mapping,
    extra: Mapping[str, HetDPTRecord],
    meta: Optional[Mapping],
    teacher_prefix: Optional[str],
) -> str:
    """Where the backbone is: where its record is, else where the meta says,
    else ``''`` for a bare backbone and ``'backbone.'`` for a model."""
    students = [
        p
        for p in extra
        if not (teacher_prefix and p.startswith(teacher_prefix))
    ]
    if 'backbone.' in students:
        return 'backbone.'
    if students:
        return sorted(students, key=len)[0]
    if isinstance(meta, Mapping) and isinstance(meta.get('prefix'), str):
        return meta['prefix']
    if recognising_family(state_dict) is None and any(
        k.startswith('backbone.') for k in state_dict
    ):
        return 'backbone.'
    return ''


def read_backbone_checkpoint(
    checkpoint: Union[Mapping, str, os.PathLike],
    source: Optional[str] = None,
    prefix: Optional[str] = None,
    mmap: bool = False,
) -> BackboneCheckpoint:
    """The one reader of a checkpoint's backbone (a loaded dict, a file or
    a URL), its record read or inferred and checked against the tensors."""
    checkpoint, source = _loaded(checkpoint, source, mmap)
    state_dict = unwrap_state_dict(checkpoint)
    records = records_in(state_dict, source)
    # Every record but a distillation classifier's (which says only where
    # its teacher is) is a backbone's.
    extra = {
        prefix: HetDPTRecord.from_dict(
            record,
            source_of(state_dict[prefix + EXTRA_STATE_KEY]) or source,
            origin='extra_state',
        )
        for prefix, record in records.items()
        if set(record) != {'teacher_prefix'}
    }
    meta = checkpoint.get('meta')
    meta = meta.get(META_KEY) if isinstance(meta, Mapping) else None
    meta_record = (
        HetDPTRecord.from_dict(meta, source) if meta is not None else None
    )
    teacher_prefix = (meta_record and meta_record.teacher_prefix) or next(
        (
            prefix + record['teacher_prefix']
            for prefix, record in records.items()
            if isinstance(record.get('teacher_prefix'), str)
        ),
        None,
    )
    if prefix is None:
        prefix = _choose_prefix(state_dict, extra, meta, teacher_prefix)
    elif prefix and not prefix.endswith('.'):
        prefix += '.'  # MMEngine's Pretrained reads prefix='backbone' so
    raw = {
        k[len(prefix) :]: v
        for k, v in state_dict.items()
        if k.startswith(prefix) and k != prefix + EXTRA_STATE_KEY
    }
    # Other layouts of a family's weights (mmpretrain's, mmseg's ViT) are
    # read in the family's own.
    inferred, state = read_tensors(raw, source)
    if meta_record is not None and meta.get('prefix', prefix) != prefix:
        meta_record = None  # another backbone's
    record = extra.get(prefix, meta_record)
    if (
        meta_record
        and prefix in extra
        and not meta_record.same_structure(record)
    ):
        raise CheckpointError(
            f'{source}: meta["{META_KEY}"] says {meta_record.describe()}, '
            f'the weights {record.describe()}'
        )
    record = record or inferred
    if record is None:
        raise CheckpointError(
            f'{source}: no backbone of {sorted(FAMILIES)} under prefix '
            f'{prefix!r} (keys {list(state_dict)[:4]})'
        )
    record = replace(
        record, prefix=prefix, source=source, teacher_prefix=teacher_prefix
    )
    # A bare classifier file (timm's, DeiT's) has its heads beside the
    # backbone's keys.
    heads = (
        tuple(classifier_head_prefixes(state).values()) if not prefix else ()
    )
    verify(
        record,
        {
            k: v
            for k, v in state.items()
            if not heads or not k.startswith(heads)
        },
    )
    return BackboneCheckpoint(record, state, state_dict, frozenset(raw))


def _loaded(checkpoint, source: Optional[str], mmap: bool = False):
    """A loaded checkpoint and its name; a URL loads through MMEngine, whose
    schemes go through the safe loaders."""
    if isinstance(checkpoint, Mapping):
        return checkpoint, os.fspath(source or 'checkpoint')
    path = os.fspath(checkpoint)
    if '://' in path:
        from mmengine.runner.checkpoint import CheckpointLoader

        return CheckpointLoader.load_checkpoint(path, 'cpu'), path
    return load_checkpoint_file(path, mmap=mmap), path


#: The key prefixes of a classifier's class and distillation heads, per
#: layout (mmpretrain's ViT / DeiT heads, its LinearClsHead, timm / DeiT).
HEAD_LAYOUTS = (
    ('mmpretrain', 'head.layers.head.', 'head.layers.head_dist.'),
    ('mmpretrain LinearClsHead', 'head.fc.', None),
    ('timm', 'head.', 'head_dist.'),
)
#: The canonical names of the heads.
CLASS_HEAD, DIST_HEAD = 'head', 'head_dist'


def read_classifier_heads(
    checkpoint: Union[Mapping, str, os.PathLike],
    source: Optional[str] = None,
) -> Dict[str, Dict[str, torch.Tensor]]:
    """A checkpoint's linear heads: ``{'head': {'weight': ..., 'bias':
    ...}, 'head_dist': {...}}`` (the distillation head where there is one)."""
    checkpoint, source = _loaded(checkpoint, source)
    state_dict = unwrap_state_dict(checkpoint)
    prefixes = classifier_head_prefixes(state_dict)
    if prefixes:
        return {
            name: {
                k: state_dict[prefix + k]
                for k in ('weight', 'bias')
                if prefix + k in state_dict
            }
            for name, prefix in prefixes.items()
        }
    raise CheckpointError(f'{source} holds no classifier head (head.*)')


def classifier_head_prefixes(state_dict: Mapping) -> Dict[str, str]:
    """The key prefix of each linear head of a state dict, by head name."""
    for _, head_prefix, dist_prefix in HEAD_LAYOUTS:
        if head_prefix + 'weight' not in state_dict:
            continue
        return {
            name: prefix
            for name, prefix in (
                (CLASS_HEAD, head_prefix),
                (DIST_HEAD, dist_prefix),
            )
            if prefix is not None and prefix + 'weight' in state_dict
        }
    return {}
