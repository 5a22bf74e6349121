"""Checkpoint-level merging (docs/method.md section 4), shared by
:class:`~hetdpt_mm.hooks.MergeCheckpointHook` and ``tools/merge_ckpt.py``,
and applying a spec to dense weights (how the authors start stage 2).

Only the backbone's tensors change (every other tensor passes through as the
same object), and the result carries the merged backbone's record, so it
rebuilds from the file alone; what each kind of input gives:
docs/user_guides/pruning.md, *tools/merge_ckpt.py*."""

from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Dict, Mapping, Optional, Tuple, Union

import torch

from .checkpoint.reader import (
    CLASS_HEAD,
    DIST_HEAD,
    HEAD_LAYOUTS,
    BackboneCheckpoint,
    classifier_head_prefixes,
    read_backbone_checkpoint,
)
from .checkpoint.record import (
    EXTRA_STATE_KEY,
    HetDPTRecord,
    with_record,
)
from .errors import CheckpointError
from .spec import META_KEY, PruneSpec, read_json_value
from .structure import (
    build,
    require_known_gelus,
    settle,
    verify,
    with_arch,
)

#: Where MMEngine's EMAHook saves the averaged model: an
#: ``ExponentialMovingAverage`` state dict, ``steps`` and the model's keys
#: under ``module.``.
EMA_KEY = 'ema_state_dict'
EMA_MODULE = 'module.'
#: Where a bare (timm / official / authors') classifier goes in the written
#: file: the layout of mmpretrain's ImageClassifier, which every loading
#: API the docs name reads (tools/test.py, ``load_from``, ``get_model``,
#: the inferencers, ``init_cfg`` with ``prefix='backbone.'``); its heads go
#: to the names of the head the family's classifier configs use
#: (``VisionTransformerClsHead`` / ``DeiTClsHead``, Swin's
#: ``LinearClsHead``).
CLASSIFIER_PREFIX = 'backbone.'
VIT_HEADS = dict(zip((CLASS_HEAD, DIST_HEAD), HEAD_LAYOUTS[0][1:]))
CLASSIFIER_HEADS = {'swin': {CLASS_HEAD: HEAD_LAYOUTS[1][1]}}


@dataclass
class MergeSummary:
    """What :func:`merge_checkpoint` did, for logs and the command line."""

    prefix: str
    form_in: str
    spec: PruneSpec
    total_before: int
    total_after: int
    backbone_before: int
    backbone_after: int
    unchanged: bool = False
    dropped: Dict[str, int] = field(default_factory=dict)
    form_out: str = 'merged'
    spec_in: Optional[PruneSpec] = None
    #: The EMA backbone's parameters before and after, if there is one.
    ema: Optional[Tuple[int, int]] = None
    #: Top-level entries left out (optimizer, param_schedulers, ...).
    dropped_entries: Tuple[str, ...] = ()

    def format(self) -> str:
        where = (
            f'under prefix {self.prefix!r}'
            if self.prefix
            else '(bare backbone state dict)'
        )
        spec_in = self.spec_in or self.spec
        lines = [f'backbone {where}: {self.form_in} form, {spec_in}']
        if self.spec_in is not None and self.spec_in != self.spec:
            lines.append(f'spec applied: {self.spec} ({self.form_out} form)')
        if self.unchanged:
            lines.append('the checkpoint is already merged: written unchanged')
        lines += [
            f'attention layers removed: {self.spec.n_attn} '
            f'{list(self.spec.attn_removed)}',
            f'GELU layers removed:      {self.spec.n_act} '
            f'{list(self.spec.act_removed)} '
            + (
                '(FFNs merged to one linear)'
                if self.form_out == 'merged'
                else '(FFNs kept as two linears: pruned form)'
            ),
            f'backbone parameters: {self.backbone_before:,} -> '
            f'{self.backbone_after:,}',
            f'all tensors:         {self.total_before:,} -> '
            f'{self.total_after:,}',
        ]
        if self.ema is not None:
            lines.append(
                f'EMA weights ({EMA_KEY}): merged the same way, '
                f'backbone parameters {self.ema[0]:,} -> '
                f'{self.ema[1]:,}'
            )
        for what, count in self.dropped.items():
            lines.append(f'dropped {what}: {count}')
        if self.dropped_entries:
            lines.append(
                f'dropped training state: {", ".join(self.dropped_entries)} '
                '(it refers to the unmerged parameters and a finished run)'
            )
        return '\n'.join(lines)


def _numel(state: Mapping) -> int:
    """Number of weights (records are not)."""
    return sum(
        v.numel()
        for k, v in state.items()
        if isinstance(v, torch.Tensor) and not k.endswith(EXTRA_STATE_KEY)
    )


def parse_arch(value: Union[None, str, Mapping]) -> Union[None, str, Dict]:
    """``--arch``: a preset name, a JSON object, or a dict (or None)."""
    return read_json_value(value, 'arch') if isinstance(value, str) else value


def _resolve_spec(record: HetDPTRecord, spec) -> PruneSpec:
    """The spec of the output: the checkpoint's, or the user's ``spec``,
    which may remove more layers than the weights lack (applying a spec to
    dense or pruned weights; :func:`~hetdpt_mm.structure.settle` refuses
    fewer)."""
    if record.form in ('gated', 'merged'):
        if spec is not None and PruneSpec.coerce(spec, record.spec.depth) != (
            record.spec
        ):
            raise CheckpointError(f'a {record.form} file keeps its own spec')
        return record.spec  # a gated run that removed nothing merges too
    if spec is None:
        require_known_gelus(record)
        if record.spec.is_dense:
            raise ValueError('the checkpoint is dense: give --spec to apply')
        return record.spec
    return PruneSpec.coerce(spec, record.spec.depth)


def merge_checkpoint(
    checkpoint: Mapping,
    spec=None,
    prefix: Optional[str] = None,
    arch: Union[None, str, Mapping] = None,
    form: str = 'merged',
    source: str = 'checkpoint',
) -> Tuple[Dict, MergeSummary]:
    """Return ``(merged checkpoint, summary)``; ``checkpoint`` (errors name
    it ``source``, e.g. its file) is not modified.  ``spec`` (PruneSpec,
    dict or JSON; ``depth`` may be left out) is needed where the checkpoint
    cannot say it (an authors' stage-2 checkpoint) and to apply a spec to
    dense or pruned weights (it may remove more layers than the weights
    lack, never fewer); a gated or merged checkpoint's spec it must equal.
    ``form='pruned'`` writes the unmerged network of the spec (for
    fine-tuning it further).

    The merged checkpoint is ``{'state_dict': ..., 'meta': {...,
    'hetdpt': record}}`` keeping the input's other meta entries, with the
    record also in the backbone's extra state, and the EMAHook's
    ``ema_state_dict`` merged to the same spec; optimizer, schedulers,
    message hub and other training state are not carried over (they refer
    to the unmerged parameters and a finished run; the summary names them).
    Keys of a distillation teacher are dropped.  An input that is already
    merged is returned as is.  Raises ``ValueError``
    (:class:`CheckpointError` for tensors that do not fit) naming the
    problem.
    """
    loaded = read_backbone_checkpoint(checkpoint, source, prefix)
    record, backbone, state = loaded.record, loaded.state, loaded.state_dict
    prefix = record.prefix
    final_spec = _resolve_spec(record, spec)
    if record.form == 'merged' and form == 'pruned':
        raise CheckpointError('a merged file cannot be unmerged')
    if record.form == 'merged':
        size = _numel(backbone)
        return dict(checkpoint), MergeSummary(
            prefix,
            'merged',
            final_spec,
            _numel(state),
            _numel(state),
            size,
            size,
            unchanged=True,
        )

    family = loaded.family
    # A record's build arguments (already checked against the tensors) hold
    # what shapes cannot say (heads, qk_scale, a norm's eps, an MLP ratio
    # that is not an integer); without one the tensors and --arch say it.
    build_args = with_arch(
        record, backbone, parse_arch(arch) if arch is not None else None
    ).arch
    merged_record = HetDPTRecord(
        spec=final_spec,
        form=form,
        family=record.family,
        arch=build_args,
        semantics=dict(record.semantics),
        # One layout for every input: a bare file's backbone (and heads)
        # go where mmpretrain's classifier has them.
        prefix=prefix or CLASSIFIER_PREFIX,
        source=record.source,
    )
    settle(merged_record, True, replace(record, arch=build_args), convert=True)
    network = build(merged_record)

    def merge_state(source: BackboneCheckpoint):
        """``source``'s state dict with its backbone converted to the
        merged record (the model's, and its EMA's the same way)."""
        converted = family.convert_weights(
            source.state, final_spec, form, record.semantics
        )
        return _assemble_state(
            source, converted, network, merged_record, record.teacher_prefix
        )

    out_state, dropped, backbone_sizes = merge_state(loaded)
    out = {'state_dict': out_state}
    ema = checkpoint.get(EMA_KEY)
    ema_sizes = None
    if isinstance(ema, Mapping):
        ema_loaded = read_backbone_checkpoint(
            {
                'state_dict': OrderedDict(
                    (k[len(EMA_MODULE) :], v)
                    for k, v in ema.items()
                    if k.startswith(EMA_MODULE)
                )
            },
            EMA_KEY,
            prefix,
        )
        ema_state, _, ema_sizes = merge_state(ema_loaded)
        out[EMA_KEY] = _with_module_prefix(ema, ema_state)

    meta = (
        checkpoint.get('meta')
        if isinstance(checkpoint.get('meta'), Mapping)
        else {}
    )
    out_meta = {k: v for k, v in meta.items() if k != META_KEY}
    out_meta[META_KEY] = merged_record.to_dict()
    out['meta'] = out_meta
    summary = MergeSummary(
        prefix=prefix,
        form_in=record.form,
        spec=final_spec,
        total_before=_numel(state),
        total_after=_numel(out_state),
        backbone_before=backbone_sizes[0],
        backbone_after=backbone_sizes[1],
        dropped=dropped,
        form_out=form,
        spec_in=record.spec,
        ema=ema_sizes,
        dropped_entries=tuple(
            k
            for k in checkpoint
            if k not in out and checkpoint[k] is not state
        )
        if state is not checkpoint
        else (),
    )
    return out, summary


def _assemble_state(
    source: BackboneCheckpoint,
    converted: Mapping,
    network,
    merged_record: HetDPTRecord,
    teacher: Optional[str],
):
    """``source``'s whole state dict with ``converted`` (its backbone in the
    merged record's form) in place of its backbone; returns it, what was
    dropped, and the backbone's sizes before and after (a bare state dict's
    classifier counted in neither); a bare input's keys go to
    :data:`CLASSIFIER_PREFIX` and :data:`CLASSIFIER_HEADS`."""
    prefix, out_prefix = source.record.prefix, merged_record.prefix
    family_heads = CLASSIFIER_HEADS.get(merged_record.family, VIT_HEADS)
    heads = {
        old: family_heads[name]
        for name, old in classifier_head_prefixes(source.state_dict).items()
        if not prefix and name in family_heads
    }
    # A bare timm / authors' state dict also holds the classifier (head.*,
    # head_dist.*): it is passed through, not merged.
    own = network.state_dict()
    foreign = (
        set()
        if prefix
        else {
            k
            for k, v in converted.items()
            if k not in own and source.state.get(k) is v
        }
    )
    merged_backbone = {k: v for k, v in converted.items() if k not in foreign}
    verify(merged_record, merged_backbone)
    # The merged backbone takes the place of the first backbone key, so the
    # key order of the input is kept.
    out_state, dropped, backbone_written = OrderedDict(), {}, False
    for key, value in source.state_dict.items():
        relative = key[len(prefix) :] if key.startswith(prefix) else None
        head = next((h for h in heads if key.startswith(h)), None)
        if head:
            out_state[heads[head] + key[len(head) :]] = value
        elif teacher and key.startswith(teacher):
            dropped['distillation teacher tensors'] = (
                dropped.get('distillation teacher tensors', 0) + 1
            )
        elif key.endswith(EXTRA_STATE_KEY) and (
            relative == EXTRA_STATE_KEY or teacher
        ):
            continue  # rewritten below, or the teacher's whereabouts
        elif relative in source.layout_keys and relative not in foreign:
            if not backbone_written:
                out_state.update(
                    (out_prefix + k, v)
                    for k, v in with_record(
                        merged_backbone, merged_record
                    ).items()
                )
                backbone_written = True
        else:
            out_state[key] = value
    gates = sum(network._is_gate_key(k) for k in source.state)
    if gates:
        dropped['gate tensors'] = gates
    backbone_before = {
        k: v for k, v in source.state.items() if k not in foreign
    }
    return (
        out_state,
        dropped,
        (_numel(backbone_before), _numel(merged_backbone)),
    )


def _with_module_prefix(ema: Mapping, module_state: Mapping) -> 'OrderedDict':
    """An EMA state dict (``steps``, ``module.<model keys>``) with the
    model's keys replaced by ``module_state``, in the input's order."""
    out, written = OrderedDict(), False
    for key, value in ema.items():
        if not key.startswith(EMA_MODULE):
            out[key] = value
        elif not written:
            out.update((EMA_MODULE + k, v) for k, v in module_state.items())
            written = True
    return out
