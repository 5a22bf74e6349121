"""Reading a checkpoint of any supported layout: its HetDPT backbone, its
record checked against its tensors, and its linear classifier heads
(docs/advanced/checkpoint_record.md)."""

import functools
import json
import os
from dataclasses import dataclass, replace
from typing import Any, Dict, Mapping, Optional, Union

import torch

from ..registry import FAMILIES, get_family, recognising_family
from ..spec import LAYER_KINDS, META_KEY
from .record import HetDPTRecord, RecordError, plain_data, records_in
from .safe_load import (
    EXTRA_STATE_KEY,
    CheckpointError,
    StateDictMismatch,
    load_checkpoint_file,
    source_of,
)


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
    teacher_prefix = (
        meta.get('teacher_prefix') if isinstance(meta, Mapping) else None
    )
    if teacher_prefix is not None and not isinstance(teacher_prefix, str):
        raise RecordError(
            f'{source}: meta["{META_KEY}"]["teacher_prefix"] '
            f'is a {type(teacher_prefix).__name__}, not a '
            'string'
        )
    teacher_prefix = teacher_prefix or next(
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
    if prefix and not raw:
        raise CheckpointError(
            f'{source} has no keys with prefix {prefix!r} (first keys: '
            f'{list(state_dict)[:5]})'
        )
    # Other layouts of a family's weights (mmpretrain's, mmseg's ViT) are
    # read in the family's own.
    family = recognising_family(raw)
    state = family.codec.canonical_state(raw) if family is not None else raw
    meta_record = (
        HetDPTRecord.from_dict(meta, source, origin='meta')
        if isinstance(meta, Mapping) and meta.get('prefix', prefix) == prefix
        else None
    )
    record = extra.get(prefix, meta_record)
    if (
        meta_record is not None
        and prefix in extra
        and (
            (meta_record.spec, meta_record.form) != (record.spec, record.form)
        )
    ):
        raise StateDictMismatch(
            f'{source}: meta["{META_KEY}"] says {meta_record.describe()} but '
            f"the backbone's weights carry {record.describe()}"
        )
    if record is None:
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
    expected = ', '.join(
        f'{head}weight ({name})' for name, head, _ in HEAD_LAYOUTS
    )
    raise CheckpointError(
        f'{source} holds no classifier head: expected one of {expected}; '
        f'found {list(state_dict)[:5]}...'
    )


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


def check_tensors_fit(family, record: HetDPTRecord, state: Mapping) -> None:
    """Every tensor the network of ``record`` (of ``family``) holds is in
    ``state`` with its shape, and ``state`` holds no other."""
    expected = _record_shapes(
        family,
        json.dumps(record.to_dict(False), sort_keys=True),
        record.source,
    )
    found = {
        k: tuple(v.shape)
        for k, v in state.items()
        if k != EXTRA_STATE_KEY and isinstance(v, torch.Tensor)
    }
    problems = [
        f'{label} {keys[:5]}{"..." if len(keys) > 5 else ""}'
        for label, keys in (
            ('missing', sorted(set(expected) - set(found))),
            ('not part of it', sorted(set(found) - set(expected))),
        )
        if keys
    ]
    problems += [
        f'{k} is {found[k]}, the record implies {shape}'
        for k, shape in expected.items()
        if k in found and found[k] != shape
    ][:5]
    if problems:
        raise StateDictMismatch(
            f'{record.source}: the tensors do not fit the HetDPT record '
            f'({record.describe()}): ' + '; '.join(problems)
        )


#: Build arguments a backbone may take other than its weights': outputs
#: chosen from the same network, and an image size the position embedding
#: is resized to.
ADAPTED_ARGS = frozenset(
    {
        'img_size',
        'out_indices',
        'out_type',
        'final_norm',
        'out_after_downsample',
    }
)


def check_arch_agrees(build_args: Mapping, record: HetDPTRecord) -> None:
    """Every build argument the record carries but :data:`ADAPTED_ARGS` is
    configured alike: shapes do not show them all (a ViT's heads, an eps)."""
    if record.arch is None:
        return
    for name in sorted((set(record.arch) | set(build_args)) - ADAPTED_ARGS):
        mine = plain_data(build_args.get(name))
        theirs = plain_data(record.arch.get(name))
        if mine != theirs:
            raise StateDictMismatch(
                f'{record.source}: the loaded weights were saved by a '
                f'network with {name}={theirs!r}, this backbone is configured '
                f'with {name}={mine!r}: configure the architecture of the '
                f'checkpoint (or leave model.backbone.{name} as the '
                "checkpoint's config has it)"
            )


def rebuilds_given_structure(
    configured: HetDPTRecord, loaded: HetDPTRecord
) -> bool:
    """Whether a backbone configured as ``configured`` rebuilds as ``loaded``
    to take its weights: no where they load as built (a gated network holds
    an unmerged one's tensors), yes for its run's merged result."""
    if {configured.form, loaded.form} == {'gated', 'pruned'} and (
        configured.form == 'gated' or loaded.spec == configured.spec
    ):
        return False
    if _is_merged_result(configured, loaded):
        return True
    raise StateDictMismatch(
        f'{loaded.source}: the loaded weights are a {loaded.describe()}, but '
        f'this backbone was built as a {configured.describe()}: leave its '
        'structure (prune_spec, gated, merged) out of the config to take the '
        'structure of the weights, or load them through '
        "init_cfg=dict(type='Pretrained', ...), which converts them"
    )


def _is_merged_result(configured: HetDPTRecord, loaded: HetDPTRecord) -> bool:
    """The merged network a gated or pruned ``configured`` one becomes (a
    gated one's gates may close more); widths are the record's."""
    if (
        loaded.form != 'merged'
        or configured.form == 'merged'
        or dict(loaded.semantics) != dict(configured.semantics)
    ):
        return False
    given, found = configured.spec, loaded.spec
    if configured.form == 'pruned':
        return given.with_widths(None) == found.with_widths(None)
    return all(
        set(given.removed(kind)) <= set(found.removed(kind))
        for kind in LAYER_KINDS
    )


@functools.lru_cache(maxsize=64)
def _record_shapes(family, record_json: str, source: str) -> Dict[str, tuple]:
    """Key -> shape of every tensor of a record's network, built on the meta
    device."""
    record = HetDPTRecord.from_dict(json.loads(record_json), source)
    try:
        with torch.device('meta'):
            network = family.from_record(record)
    # The schema bounds each value; the constructor (timm's layers) refuses
    # combinations (a width not divisible by the heads, a patch of 0).
    except (AssertionError, ArithmeticError, ValueError, RuntimeError) as err:
        raise RecordError(
            f"{source}: the HetDPT record's arguments {record.arch} do not "
            f'build a {record.family} network ({type(err).__name__}: '
            f'{str(err)[:400]})'
        ) from None
    shapes = {}
    for name, module in network.named_modules(remove_duplicate=False):
        prefix = f'{name}.' if name else ''
        tensors = list(module._parameters.items()) + [
            (k, v)
            for k, v in module._buffers.items()
            if k not in module._non_persistent_buffers_set
        ]
        shapes.update(
            (prefix + k, tuple(v.shape)) for k, v in tensors if v is not None
        )
    return shapes
