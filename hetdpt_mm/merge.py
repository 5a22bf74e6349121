"""Checkpoint-level merging (METHOD.md section 4), shared by
:class:`~hetdpt_mm.hooks.MergeCheckpointHook` and ``tools/merge_ckpt.py``.

:func:`merge_checkpoint` turns a checkpoint holding a HetDPTViT (our gated or
pruned classification checkpoints, mmdet / mmseg / mmpretrain checkpoints
with the backbone under a prefix, the authors' stage-2 ``{'model': sd}``
files, bare state dicts) into one whose backbone is in the merged form:
removed attention weights and gate parameters dropped, activation-free FFNs
merged into one linear.  Only the backbone's tensors change; every other
tensor is passed through as the same object (bit-identical).  The result
carries ``meta['hetdpt']`` with the spec, the architecture, the semantics,
``form='merged'`` and the backbone ``prefix``, so ``HetDPTViT`` rebuilds it
from the file alone.  All surgery is :func:`convert_state_dict`'s.
"""
import json
import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Dict, Mapping, Optional, Tuple, Union

import torch

from .models.hetdpt_vit import (ARCH_PRESETS, RELEASED_SEMANTICS, HetDPTViT,
                                describe_checkpoint,
                                extract_backbone_state_dict, resolve_arch)
from .models.state_dict import (GATE_SUFFIXES, StateDictMismatch,
                                convert_state_dict, gate_spec, infer_layout,
                                is_vit_state_dict)
from .spec import META_KEY, PruneSpec, spec_meta


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

    def format(self) -> str:
        where = f'under prefix {self.prefix!r}' if self.prefix else \
            '(bare backbone state dict)'
        lines = [f'backbone {where}: {self.form_in} form, {self.spec}']
        if self.unchanged:
            lines.append('the checkpoint is already merged: written '
                         'unchanged')
        lines += [
            f'attention layers removed: {self.spec.n_attn} '
            f'{list(self.spec.attn_removed)}',
            f'GELU layers removed:      {self.spec.n_act} '
            f'{list(self.spec.act_removed)} (FFNs merged to one linear)',
            f'backbone parameters: {self.backbone_before:,} -> '
            f'{self.backbone_after:,}',
            f'all tensors:         {self.total_before:,} -> '
            f'{self.total_after:,}',
        ]
        for what, count in self.dropped.items():
            lines.append(f'dropped {what}: {count}')
        return '\n'.join(lines)


def _numel(state: Mapping) -> int:
    return sum(v.numel() for v in state.values()
               if isinstance(v, torch.Tensor))


def _state_dict_of(checkpoint: Mapping) -> Tuple[Optional[str], Mapping]:
    """``(key holding the state dict or None for a bare one, state dict)``."""
    for key in ('state_dict', 'model'):
        if isinstance(checkpoint.get(key), Mapping):
            return key, checkpoint[key]
    return None, checkpoint


def resolve_prefix(state_dict: Mapping, record: Optional[Mapping],
                   prefix: Optional[str]) -> str:
    """The backbone's key prefix: given, else from the meta record, else
    ``''`` for a bare ViT state dict and ``'backbone.'`` otherwise."""
    if prefix is not None:
        return prefix
    if record and isinstance(record.get('prefix'), str):
        return record['prefix']
    return '' if is_vit_state_dict(state_dict) else 'backbone.'


def parse_arch(value: Union[None, str, Mapping]) -> Optional[Dict]:
    """``--arch``: a preset name, a JSON object, or a dict (or None)."""
    if value is None:
        return None
    if isinstance(value, str) and value.lstrip().startswith('{'):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as err:
            raise ValueError(f'arch is not valid JSON ({err})') from None
    return resolve_arch(value)


def infer_build_args(state: Mapping, arch: Optional[Mapping] = None) -> Dict:
    """HetDPTViT constructor arguments (as in ``spec_meta()['arch']``) of a
    backbone state dict that has no HetDPT meta.

    Everything is read from tensor shapes except the number of heads, which
    comes from ``arch`` or from the DeiT preset with the same width, depth and
    MLP ratio.
    """
    pos_embed = state['pos_embed']
    proj = state['patch_embed.proj.weight']
    dim = int(pos_embed.shape[-1])
    depth = infer_layout(state)['depth']
    fc1 = [v for k, v in state.items() if k.endswith('mlp.fc1.weight')]
    mlp_ratio = fc1[0].shape[0] / dim if fc1 else None
    with_cls = 'cls_token' in state
    distilled = 'dist_token' in state
    num_patches = pos_embed.shape[1] - int(with_cls) - int(distilled)
    side = math.isqrt(num_patches)
    if side * side != num_patches:
        raise StateDictMismatch(f'pos_embed has {num_patches} patch '
                                'positions, not a square grid')
    if arch is None:
        matches = [dict(p) for p in ARCH_PRESETS.values()
                   if p['embed_dims'] == dim and p['num_layers'] == depth and
                   (mlp_ratio is None or p['mlp_ratio'] == mlp_ratio)]
        if not matches:
            raise ValueError(
                f'the checkpoint has no HetDPT meta and its shape (width '
                f'{dim}, {depth} blocks) matches no preset in '
                f'{sorted(ARCH_PRESETS)}: give the architecture (number of '
                'heads) with --arch')
        arch = matches[0]
    arch = dict(arch)
    if arch['embed_dims'] != dim or arch['num_layers'] != depth:
        raise StateDictMismatch(
            f'arch {arch} does not match the checkpoint (width {dim}, '
            f'{depth} blocks)')
    if mlp_ratio is not None:
        arch['mlp_ratio'] = mlp_ratio
    patch = int(proj.shape[-1])
    return dict(arch=arch, img_size=(side * patch, side * patch),
                patch_size=patch, in_channels=int(proj.shape[1]),
                distilled=distilled, with_cls_token=with_cls,
                qkv_bias=any(k.endswith('attn.qkv.bias') for k in state))


def _resolve_spec(record: Mapping, backbone: Mapping, has_meta: bool,
                  spec) -> PruneSpec:
    """The checkpoint's spec, cross-checked against ``spec`` (the user's)
    and against what the tensors say."""
    found = record['spec']
    depth = found.depth
    if spec is not None:
        spec = PruneSpec.coerce(spec, depth)
    if record['form'] == 'gated':
        gates = gate_spec(backbone, depth)
        if gates != found:
            raise StateDictMismatch(f'the meta spec {found} does not match '
                                    f'the closed gates {gates}')
    if has_meta or record['form'] in ('gated', 'merged'):
        if spec is not None and spec != found:
            raise StateDictMismatch(
                f'the given spec {spec} does not match the checkpoint\'s '
                f'{"meta" if has_meta else record["form"]} spec {found}')
        return found
    # A pruned, unmerged checkpoint without meta: the missing attention
    # weights are known, the removed GELUs are not.
    if spec is None:
        if record.get('act_unknown'):
            raise ValueError(
                f'the checkpoint has no attention weights for blocks '
                f'{list(found.attn_removed)} and no HetDPT meta, so its '
                'removed GELUs are unknown (an authors\' stage-2 checkpoint?):'
                ' pass the spec with --spec')
        raise ValueError('the checkpoint is dense (no layer removed) and has '
                         'no HetDPT meta: there is nothing to merge')
    if spec.attn_removed != found.attn_removed:
        raise StateDictMismatch(
            f'the spec does not match the checkpoint\'s tensors: it removes '
            f'attention in blocks {list(spec.attn_removed)}, but the '
            f'checkpoint lacks attention weights for blocks '
            f'{list(found.attn_removed)}')
    return spec


def _merged_network(build_args: Mapping, spec: PruneSpec,
                    semantics: Mapping, final_norm: bool) -> HetDPTViT:
    """The merged HetDPTViT the output must load into."""
    kwargs = dict(build_args)
    kwargs['img_size'] = tuple(kwargs['img_size'])
    return HetDPTViT(**kwargs, **semantics, prune_spec=spec, merged=True,
                     final_norm=final_norm)


def _check_loadable(state: Mapping, network: HetDPTViT) -> None:
    expected = network.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    shapes = [f'{k}: {tuple(state[k].shape)} vs {tuple(v.shape)}'
              for k, v in expected.items()
              if k in state and state[k].shape != v.shape]
    if missing or unexpected or shapes:
        raise StateDictMismatch(
            'the merged weights do not fit a merged HetDPTViT with '
            f'{network.prune_spec}: missing {missing[:5]}, unexpected '
            f'{unexpected[:5]}, shape mismatches {shapes[:5]}')


def merge_checkpoint(checkpoint: Mapping, spec=None,
                     prefix: Optional[str] = None,
                     arch: Union[None, str, Mapping] = None
                     ) -> Tuple[Dict, MergeSummary]:
    """Return ``(merged checkpoint, summary)``; ``checkpoint`` is not
    modified.  ``spec`` (PruneSpec, dict or JSON; ``depth`` may be left
    out) is needed only where the checkpoint cannot say it (an authors'
    stage-2 checkpoint); otherwise it must agree with the checkpoint.

    The merged checkpoint is ``{'state_dict': ..., 'meta': {...,
    'hetdpt': record}}`` keeping the input's other meta entries; optimizer
    and other training state are not carried over (they refer to the
    unmerged parameters).  Keys of a distillation teacher (meta
    ``teacher_prefix``) are dropped.  An input that is already merged is
    returned as is.  Raises ``ValueError`` (:class:`StateDictMismatch` for
    tensors that do not fit) naming the problem.
    """
    _, state = _state_dict_of(checkpoint)
    meta = checkpoint.get('meta') if isinstance(checkpoint.get('meta'),
                                                Mapping) else {}
    raw_record = meta.get(META_KEY) if isinstance(meta.get(META_KEY),
                                                  Mapping) else None
    prefix = resolve_prefix(state, raw_record, prefix)
    backbone, _ = extract_backbone_state_dict(checkpoint, prefix,
                                              'checkpoint')
    record = describe_checkpoint(checkpoint, backbone)
    has_meta = raw_record is not None
    final_spec = _resolve_spec(record, backbone, has_meta, spec)
    if record['form'] == 'merged':
        size = _numel(backbone)
        return dict(checkpoint), MergeSummary(
            prefix, 'merged', final_spec, _numel(state), _numel(state), size,
            size, unchanged=True)

    if has_meta and 'arch' in raw_record and arch is None:
        build_args = dict(raw_record['arch'])
    else:
        build_args = infer_build_args(backbone, parse_arch(arch))
    semantics = dict(RELEASED_SEMANTICS)
    semantics.update(record.get('semantics') or {})

    # Dense-prediction backbones may be built without the final norm.
    network = _merged_network(build_args, final_spec, semantics,
                              final_norm='norm.weight' in backbone)
    if not prefix:
        # A bare timm / authors' state dict also holds the classifier
        # (head.*, head_dist.*): only the backbone's own keys are converted.
        own = network.state_dict().keys()
        backbone = {k: v for k, v in backbone.items()
                    if k.startswith('blocks.') or k in own}
    merged_backbone = convert_state_dict(backbone, final_spec, 'merged')
    _check_loadable(merged_backbone, network)

    teacher_prefix = raw_record.get('teacher_prefix') if has_meta else None
    # The merged backbone takes the place of the first backbone key, so the
    # key order of the input is kept.
    out_state, dropped, backbone_written = OrderedDict(), {}, False
    for key, value in state.items():
        if teacher_prefix and key.startswith(teacher_prefix):
            dropped['distillation teacher tensors'] = dropped.get(
                'distillation teacher tensors', 0) + 1
        elif key.startswith(prefix) and key[len(prefix):] in backbone:
            if not backbone_written:
                out_state.update((prefix + k, v)
                                 for k, v in merged_backbone.items())
                backbone_written = True
        else:
            out_state[key] = value
    gates = sum(k.endswith(GATE_SUFFIXES) for k in backbone)
    if gates:
        dropped['gate tensors'] = gates

    new_record = spec_meta(final_spec, 'merged', build_args, semantics)
    new_record['prefix'] = prefix
    out_meta = {k: v for k, v in meta.items() if k != META_KEY}
    out_meta[META_KEY] = new_record
    summary = MergeSummary(
        prefix=prefix, form_in=record['form'], spec=final_spec,
        total_before=_numel(state), total_after=_numel(out_state),
        backbone_before=_numel(backbone),
        backbone_after=_numel(merged_backbone),
        dropped=dropped)
    return {'state_dict': out_state, 'meta': out_meta}, summary

