"""Which network a backbone is, decided in one place.

A backbone's structure -- family, spec, form, semantics and every build
argument that no tensor shape shows (heads, norm eps, qk scale, patch bias)
-- follows from three inputs: the config's build arguments, a checkpoint's
record and the checkpoint's tensors.  The pure functions here decide it,
and every door calls them: construction with ``init_cfg``,
``load_state_dict`` (``load_checkpoint``, ``load_from``, ``--resume``, the
toolboxes' inference APIs), the runner's config preparation, merging, width
pruning and the benchmark (docs/advanced/checkpoint_record.md).  A stock
OpenMMLab or timm checkpoint is a record inferred from its tensors."""

import functools
import json
from dataclasses import replace
from typing import Dict, Mapping, Optional, Tuple

import torch

from .checkpoint.record import HetDPTRecord, plain_data
from .checkpoint.safe_load import EXTRA_STATE_KEY
from .errors import CheckpointError
from .registry import get_family, recognising_family
from .spec import LAYER_KINDS, SEMANTICS_CHOICES, PruneSpec

#: Build arguments a loaded network may differ in: outputs chosen from the
#: same network, and an image size its position embedding is resized to.
ADAPTED_ARGS = frozenset(
    {
        'img_size',
        'out_indices',
        'out_type',
        'final_norm',
        'out_after_downsample',
    }
)
#: What converting a file's weights (``init_cfg``) also adapts: a
#: distillation token or patch bias dropped (as mmseg's ViT drops it), bias
#: tables resampled to another window.
CONVERTED_ARGS = ADAPTED_ARGS | {'distilled', 'window_size'}
STRUCTURE_ARGS = ('prune_spec', 'gated', 'merged', *SEMANTICS_CHOICES)


def is_given(prune_spec, gated, merged) -> bool:
    """Whether a config sets a backbone's structure (else the weights it
    loads bring theirs)."""
    return bool(gated) or prune_spec is not None or merged is not None


def structure_args(record: HetDPTRecord) -> Dict:
    """The constructor arguments of ``record``'s structure (what a config
    gives to build it)."""
    return dict(
        prune_spec=record.spec.to_dict(),
        gated=record.form == 'gated',
        merged=record.form == 'merged',
        **record.semantics,
    )


def build(record: HetDPTRecord, **kwargs):
    """The backbone of ``record`` (with ``arch``), ``kwargs`` choosing its
    outputs."""
    return get_family(record.family)(
        **dict(record.arch), **structure_args(record), **kwargs
    )


def initial_structure(
    family: str,
    depth: int,
    prune_spec,
    gated: bool,
    merged: Optional[bool],
    semantics: Mapping[str, Optional[str]],
    defaults: Mapping[str, str],
    loaded: Optional[HetDPTRecord],
) -> Tuple[PruneSpec, str, Dict[str, str]]:
    """The spec, form and semantics a backbone is built with: its arguments
    where given (``None``: not given), else those of the ``init_cfg``
    checkpoint's record ``loaded``, else dense, unmerged and ``defaults``."""
    if loaded is not None:
        check_family(family, loaded, convert=True)
        if loaded.family != family:
            loaded = None  # a start: its weights, not its structure
    if prune_spec is None and loaded is not None:
        require_known_gelus(loaded)
    if prune_spec is not None or loaded is None:
        spec = PruneSpec.coerce(prune_spec, depth)
    else:
        spec = loaded.spec
    if spec.depth != depth:
        raise CheckpointError(f'{loaded.source}: not {depth} blocks')
    if gated and merged:
        raise ValueError('a gated (search) backbone cannot be merged')
    if merged is None:
        merged = loaded is not None and loaded.form == 'merged'
    form = 'gated' if gated else 'merged' if merged else 'pruned'
    chosen = dict(defaults, **(loaded.semantics if loaded else {}))
    chosen.update({k: v for k, v in semantics.items() if v is not None})
    for name, value in chosen.items():
        if value not in SEMANTICS_CHOICES[name]:
            raise ValueError(f'{name}={value!r}: not a semantics choice')
    return spec, form, chosen


def check_settings(
    configured: Mapping, loaded: HetDPTRecord, adapted=ADAPTED_ARGS
) -> None:
    """Every build argument the record carries (those no shape shows among
    them) is configured alike, but for the ``adapted`` ones."""
    if loaded.arch is None:
        return
    mine, theirs = plain_data(configured), plain_data(loaded.arch)
    for name in sorted((set(mine) | set(theirs)) - adapted):
        if name == 'patch_bias' and 'patch_bias' in mine and adapted:
            continue  # a converted file's patch bias is dropped, as mmseg's
        if mine.get(name) != theirs.get(name):
            raise CheckpointError(
                f'{loaded.source} has {name}={theirs.get(name)!r}, the config '
                f'{mine.get(name)!r}: set model.backbone.{name} as the file'
            )


def read_tensors(
    state: Mapping, source: str
) -> Tuple[Optional[HetDPTRecord], Mapping]:
    """The record that tensors without one imply, and the tensors in their
    family's own layout (a stock OpenMMLab or timm file read as the
    family's); ``(None, state)`` for tensors of no family."""
    family = recognising_family(state)
    if family is None:
        return None, state
    tensors = family.codec.canonical_state(state)
    return family.codec.record_from_tensors(tensors, source), tensors


def require_known_gelus(loaded: HetDPTRecord) -> None:
    """Unmerged FFNs look alike with or without their GELU: tensors with
    attention removed and no record cannot say which GELUs are gone."""
    if loaded.act_unknown:
        raise CheckpointError(
            f'{loaded.source}: its removed GELUs are unknown without a '
            'record: give prune_spec'
        )


def check_family(
    family: str, loaded: HetDPTRecord, convert: bool = False
) -> None:
    """``loaded`` is of ``family``, or (``convert``) dense weights of a
    family it starts from (a ViTDet from MAE's plain ViT)."""
    if loaded.family != family and not (convert and is_start(family, loaded)):
        raise CheckpointError(
            f'{loaded.source} holds a {loaded.family}: build type='
            f"'{get_family(loaded.family).__name__}'"
        )


def is_start(family: str, loaded: HetDPTRecord) -> bool:
    """Whether ``loaded`` is dense weights of another family that
    ``family`` starts from (``STARTS_FROM``): a start, not a structure."""
    return (
        loaded.family in get_family(family).STARTS_FROM
        and loaded.form != 'gated'
        and loaded.spec.is_dense
    )


def settle(
    configured: HetDPTRecord,
    given: bool,
    loaded: HetDPTRecord,
    tensors: Optional[Mapping] = None,
    convert: bool = False,
) -> HetDPTRecord:
    """The structure a backbone built as ``configured`` (``given``: its
    config set the structure) takes to hold the weights of ``loaded``
    (``tensors``: theirs, in the family's layout): ``configured`` where
    they load (or, ``convert``, are converted) into it, else ``loaded``'s,
    rebuilt.  Raises naming what does not fit."""
    source = loaded.source
    check_family(configured.family, loaded, convert)
    if loaded.family != configured.family:
        return configured  # dense weights of a family this one starts from
    check_settings(
        configured.arch, loaded, CONVERTED_ARGS if convert else ADAPTED_ARGS
    )
    mine, theirs = configured.spec, loaded.spec
    if convert:  # weights pruned further cannot restore what they lost
        lost = {
            kind: sorted(set(theirs.removed(kind)) - set(mine.removed(kind)))
            for kind in LAYER_KINDS
        }
        if theirs.depth != mine.depth or any(lost.values()):
            raise CheckpointError(
                f'{source} lacks layers the config keeps: {loaded.describe()}'
            )
        return configured
    if loaded.same_structure(configured):
        return configured
    if loaded.from_tensors and loaded.form == 'gated':
        return configured  # gates are buffers: they load as tensors do
    if loaded.from_tensors:
        # Unmerged FFNs look alike with or without their GELU: tensors that
        # fit this structure are its weights.
        try:
            get_family(configured.family).codec.check_record(
                configured, tensors
            )
            return configured
        except CheckpointError:
            require_known_gelus(loaded)
    if not given:
        return replace(loaded, arch=configured.arch)
    forms = {configured.form, loaded.form}
    if forms == {'gated', 'pruned'} and (
        configured.form == 'gated' or mine == theirs
    ):
        return configured  # a gated network holds the unmerged tensors
    if _is_merged_result(configured, loaded):
        return replace(loaded, arch=configured.arch)
    raise CheckpointError(
        f'{source} is a {loaded.describe()}, the config '
        f'{configured.describe()}: leave prune_spec / merged out of the config'
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


def with_arch(record: HetDPTRecord, state: Mapping, hint=None) -> HetDPTRecord:
    """``record`` with the build arguments of its network: its own (which
    ``hint``, an ``--arch``, may repeat but not change), else those its
    tensors ``state`` say, ``hint`` giving what no shape shows (heads)."""
    codec = get_family(record.family).codec
    if record.arch is None:
        return replace(record, arch=codec.build_args_from_tensors(state, hint))
    if isinstance(hint, Mapping):
        hint = hint.get('arch', hint)
    if hint is not None and plain_data(codec.arch_settings(hint)) != (
        plain_data(codec.arch_settings(record.arch['arch']))
    ):
        raise ValueError(f'--arch {hint}: the file records another')
    return record


def verify(record: HetDPTRecord, state: Mapping) -> None:
    """The one check of a record against the tensors it travels with, run
    by every path that adopts one: its arguments are the family's, say
    what they build, the tensors are floating point, and every tensor that
    network holds is in ``state`` with its shape, and no other."""
    family = get_family(record.family)
    family.validate_record(record)
    family.codec.check_record(record, state)
    found = {
        k: v
        for k, v in state.items()
        if k != EXTRA_STATE_KEY and isinstance(v, torch.Tensor)
    }
    problems = [
        f'{k} is {v.dtype}'
        for k, v in found.items()
        if not v.is_floating_point()
    ][:5]
    if record.arch is not None:
        expected = _record_shapes(
            json.dumps(record.to_dict(False), sort_keys=True), record.source
        )
        problems += [
            f'{label} {keys[:5]}'
            for label, keys in (
                ('missing', sorted(set(expected) - set(found))),
                ('not part of it', sorted(set(found) - set(expected))),
            )
            if keys
        ] + [
            f'{k} is {tuple(found[k].shape)}'
            for k, shape in expected.items()
            if k in found and tuple(found[k].shape) != shape
        ][:5]
    if problems:
        raise CheckpointError(f'{record.source}: {"; ".join(problems)}')


@functools.lru_cache(maxsize=64)
def _record_shapes(record_json: str, source: str) -> Dict[str, tuple]:
    """Key -> shape of every tensor of a record's network, built on the meta
    device; the record must say what it builds (a ``null`` for a default
    is a different network)."""
    record = HetDPTRecord.from_dict(json.loads(record_json), source)
    try:
        with torch.device('meta'):
            network = build(record)
    # The schema bounds each value; the constructor (timm's layers) refuses
    # combinations (a width not divisible by the heads, a patch of 0).
    except (
        AssertionError,
        ArithmeticError,
        LookupError,
        TypeError,
        ValueError,
        RuntimeError,
    ) as err:
        raise CheckpointError(
            f'{source}: {type(err).__name__}: {err}'
        ) from None
    built, given = plain_data(network.build_args()), plain_data(record.arch)
    if built != given:
        differ = sorted(
            k for k in {**built, **given} if built.get(k) != given.get(k)
        )
        raise CheckpointError(
            f"{source}: the record's {differ} are not what it builds"
        )
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
