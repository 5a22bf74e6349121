"""The record against the tensors it travels with: the network a record
describes, and the comparison of a configured architecture with a record's
(docs/advanced/checkpoint_record.md)."""

import functools
import json
from typing import Dict, Mapping

import torch

from ..checkpoint import StateDictMismatch
from ..record import EXTRA_STATE_KEY, HetDPTRecord
from ..record_schema import RecordError
from ..spec import LAYER_KINDS


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
    """A backbone configured with ``build_args`` loads weights of
    ``record`` only if every build argument the record carries (an
    argument left out is its default) is configured alike, but for
    :data:`ADAPTED_ARGS`: shapes do not show all of them (a ViT's number of
    heads, its norms' epsilon, a Swin's ``qk_scale``)."""
    if record.arch is None:
        return
    for name in sorted((set(record.arch) | set(build_args)) - ADAPTED_ARGS):
        mine = _plain_json(build_args.get(name))
        theirs = _plain_json(record.arch.get(name))
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
    """Whether a backbone whose config gives its structure (``configured``,
    other than ``loaded``'s) rebuilds as ``loaded`` to take those weights:
    ``False`` where they load into it as built (a gated network holds every
    tensor of an unmerged one, the unmerged network of its spec every one
    it needs), ``True`` for its run's merged result (so that a training
    config tests the merged file), else :class:`StateDictMismatch`."""
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
    """The merged network a gated or pruned ``configured`` one becomes: the
    same semantics, and every layer the configuration removes removed (a
    gated network's gates close more; a pruned one's spec is its own).
    Widths are the record's, as for any loaded weights (HetDPT+)."""
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


def _plain_json(value) -> Dict:
    """``value`` as it reads back from a record (tuples as lists)."""
    return json.loads(json.dumps(value))


@functools.lru_cache(maxsize=64)
def _record_shapes(family, record_json: str, source: str) -> Dict[str, tuple]:
    """Key -> shape of every tensor the network of a record holds (built on
    the meta device: no memory, no initialisation)."""
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
