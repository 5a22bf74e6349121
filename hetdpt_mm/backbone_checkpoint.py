"""Reading a checkpoint of any supported layout: finding its HetDPT
backbone, its record (read in the order of :mod:`hetdpt_mm.record`, or
inferred from the tensors) checked against its tensors, and its linear
classifier heads.  Checkpoint parsing lives here and nowhere else."""

import os
from dataclasses import dataclass, replace
from typing import Any, Dict, Mapping, Optional

import torch

from .checkpoint import (
    EXTRA_STATE_KEY,
    CheckpointError,
    StateDictMismatch,
    load_checkpoint_file,
)
from .record import HetDPTRecord, record_source, records_in
from .record_schema import RecordError
from .registry import FAMILIES, get_family, recognising_family
from .spec import META_KEY


@dataclass
class BackboneCheckpoint:
    """A checkpoint's HetDPT backbone: its record and tensors.

    ``state`` holds the backbone's tensors with keys relative to it (no
    extra state), in the family's own layout; ``state_dict`` is the whole
    state dict of the checkpoint, and ``layout_keys`` the backbone's keys in
    it (relative, as the file has them: another layout's names).
    """

    record: HetDPTRecord
    state: Dict[str, Any]
    state_dict: Mapping[str, Any]
    layout_keys: frozenset

    @property
    def family(self):
        return get_family(self.record.family)


def unwrap_state_dict(checkpoint: Mapping) -> Mapping:
    """The state dict of an MMEngine (``state_dict``), DeiT / timm /
    authors' (``model``) or bare checkpoint."""
    for key in ('state_dict', 'model'):
        if isinstance(checkpoint.get(key), Mapping):
            return checkpoint[key]
    return checkpoint


def extra_state_records(
    state_dict: Mapping, source: str = 'checkpoint'
) -> Dict[str, HetDPTRecord]:
    """Every HetDPT backbone's record in a state dict, by prefix, checked
    against the schema: every record but a distillation classifier's
    (which says only where its teacher is) is a backbone's."""
    return {
        prefix: HetDPTRecord.from_dict(
            record,
            record_source(state_dict[prefix + EXTRA_STATE_KEY], source),
            origin='extra_state',
        )
        for prefix, record in records_in(state_dict, source).items()
        if set(record) != {'teacher_prefix'}
    }


def _meta_record(checkpoint: Mapping) -> Optional[Mapping]:
    meta = checkpoint.get('meta')
    if isinstance(meta, Mapping) and META_KEY in meta:
        return meta[META_KEY]
    return None


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
    checkpoint: Mapping,
    source: str = 'checkpoint',
    prefix: Optional[str] = None,
) -> BackboneCheckpoint:
    """Find the HetDPT backbone of a checkpoint of any supported layout,
    read (or infer) its record and check the record against the tensors.

    Raises :class:`CheckpointError` when there is no backbone of a known
    family, and :class:`StateDictMismatch` when the record contradicts the
    tensors.
    """
    source = os.fspath(source)
    state_dict = unwrap_state_dict(checkpoint)
    extra = extra_state_records(state_dict, source)
    meta = _meta_record(checkpoint)
    teacher_prefix = (
        meta.get('teacher_prefix') if isinstance(meta, Mapping) else None
    )
    if teacher_prefix is not None and not isinstance(teacher_prefix, str):
        raise RecordError(
            f'{source}: meta["{META_KEY}"]["teacher_prefix"] '
            f'is a {type(teacher_prefix).__name__}, not a '
            'string'
        )
    teacher_prefix = teacher_prefix or _teacher_prefix_of(state_dict, source)
    if prefix is None:
        prefix = _choose_prefix(state_dict, extra, meta, teacher_prefix)
    elif prefix and not prefix.endswith('.'):
        prefix += '.'  # MMEngine's Pretrained reads prefix='backbone' so
    raw = {
        k[len(prefix) :]: v
        for k, v in state_dict.items()
        if k.startswith(prefix) and k != prefix + EXTRA_STATE_KEY
    }
    if prefix and not raw:
        raise CheckpointError(
            f'{source} has no keys with prefix {prefix!r} (first keys: '
            f'{list(state_dict)[:5]})'
        )
    # Other layouts of a family's weights (mmpretrain's, mmseg's ViT) are
    # read in the family's own.
    family = recognising_family(raw)
    state = family.codec.canonical_state(raw) if family is not None else raw
    if prefix in extra:
        record = extra[prefix]
        if isinstance(meta, Mapping) and meta.get('prefix', prefix) == prefix:
            _check_meta_agrees(record, meta, source)
    elif isinstance(meta, Mapping) and meta.get('prefix', prefix) == prefix:
        record = HetDPTRecord.from_dict(meta, source, origin='meta')
    else:
        if family is None:
            expected = '; '.join(
                f.codec.describe_keys() for f in FAMILIES.values()
            )
            raise CheckpointError(
                f'{source} does not hold the weights of a known backbone '
                f'family: expected {expected}'
                f'{" after prefix " + repr(prefix) if prefix else ""}, found '
                f'{list(state)[:5]}'
            )
        record = family.codec.record_from_tensors(state, source)
    record = replace(
        record, prefix=prefix, source=source, teacher_prefix=teacher_prefix
    )
    # A bare classifier file (timm's, DeiT's) has its heads beside the
    # backbone's keys.
    heads = (
        tuple(classifier_head_prefixes(state).values()) if not prefix else ()
    )
    get_family(record.family).verify_record(
        record,
        {
            k: v
            for k, v in state.items()
            if not heads or not k.startswith(heads)
        },
    )
    return BackboneCheckpoint(record, state, state_dict, frozenset(raw))


def _teacher_prefix_of(state_dict: Mapping, source: str) -> Optional[str]:
    """A distillation classifier records where its teacher is."""
    for prefix, record in records_in(state_dict, source).items():
        if isinstance(record.get('teacher_prefix'), str):
            return prefix + record['teacher_prefix']
    return None


def _check_meta_agrees(
    record: HetDPTRecord, meta: Mapping, source: str
) -> None:
    other = HetDPTRecord.from_dict(meta, source, origin='meta')
    if other.spec != record.spec or other.form != record.form:
        raise StateDictMismatch(
            f'{source}: meta["{META_KEY}"] says {other.describe()} but the '
            f"backbone's weights carry {record.describe()}"
        )


def load_backbone_checkpoint(
    source: str, prefix: Optional[str] = None, mmap: bool = False
) -> BackboneCheckpoint:
    """:func:`read_backbone_checkpoint` of a file or of any URL MMEngine
    can load (through the same safe loaders)."""
    source = os.fspath(source)
    return read_backbone_checkpoint(
        load_any_checkpoint(source, mmap), source, prefix
    )


def load_any_checkpoint(source: str, mmap: bool = False) -> Mapping:
    """A local file, or any URL MMEngine can load, through the same safe
    loaders (a URL through torch.hub's cache)."""
    if '://' in source:
        from mmengine.runner.checkpoint import CheckpointLoader

        return CheckpointLoader.load_checkpoint(source, 'cpu')
    return load_checkpoint_file(source, mmap=mmap)


#: Where a classifier checkpoint keeps its linear heads, per layout: the
#: key prefix of the class head and of the distillation head.
HEAD_LAYOUTS = (
    # mmpretrain's VisionTransformerClsHead / DeiTClsHead (also ours)
    ('mmpretrain', 'head.layers.head.', 'head.layers.head_dist.'),
    # mmpretrain's LinearClsHead
    ('mmpretrain LinearClsHead', 'head.fc.', None),
    # timm, DeiT (facebookresearch) and the authors' release
    ('timm', 'head.', 'head_dist.'),
)
#: The canonical names of the heads.
CLASS_HEAD, DIST_HEAD = 'head', 'head_dist'


def read_classifier_heads(
    checkpoint: Mapping, source: str = 'checkpoint'
) -> Dict[str, Dict[str, torch.Tensor]]:
    """The linear classifier heads of a checkpoint of any supported layout:
    ``{'head': {'weight': ..., 'bias': ...}, 'head_dist': {...}}`` (the
    distillation head only where the file has one).

    Raises :class:`CheckpointError` naming the layouts looked for when the
    checkpoint holds no head.
    """
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
    expected = ', '.join(
        f'{head}weight ({name})' for name, head, _ in HEAD_LAYOUTS
    )
    raise CheckpointError(
        f'{source} holds no classifier head: expected one of {expected}; '
        f'found {list(state_dict)[:5]}...'
    )


def classifier_head_prefixes(state_dict: Mapping) -> Dict[str, str]:
    """Where a state dict keeps its linear classifier heads: ``{'head':
    key prefix, 'head_dist': key prefix}`` (the distillation head only
    where there is one; empty without heads)."""
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


def load_classifier_heads(source: str) -> Dict[str, Dict[str, torch.Tensor]]:
    """:func:`read_classifier_heads` of a file or URL (safe loaders)."""
    source = os.fspath(source)
    return read_classifier_heads(load_any_checkpoint(source), source)
