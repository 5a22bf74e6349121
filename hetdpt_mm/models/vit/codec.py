"""The ViT family's codec: which tensors are a ViT's, what they say (a
record, build arguments), their conversion and the MACs per block, as
functions apart from the module (timm's ``checkpoint_filter_fn`` style);
the Swin and LayerScale families reuse them.  The tensor surgery is
:mod:`.state_dict`."""

import math
from typing import Dict, Mapping, Optional, Union

from ...checkpoint.record import HetDPTRecord
from ...errors import CheckpointError
from ...presets import ARCH_PRESETS
from ...pruning.cost import AnalyticCost
from ...spec import PruneSpec
from ..layers import WHOLE_BRANCH
from . import state_dict as vit_state_dict

#: The behaviour of released HetDPT (stage-2) models, docs/method.md section 1.
RELEASED_SEMANTICS = dict(
    removed_attn_output='norm', residual_gelu='both_removed'
)


def resolve_arch(arch: Union[str, Mapping]) -> Dict:
    if isinstance(arch, str):
        if arch not in ARCH_PRESETS:
            raise ValueError(f'unknown arch {arch!r}: {sorted(ARCH_PRESETS)}')
        return dict(ARCH_PRESETS[arch])
    arch = dict(arch)
    missing = {'embed_dims', 'num_layers', 'num_heads'} - set(arch)
    if missing:
        raise ValueError(f'arch dict is missing {sorted(missing)}')
    if 'feedforward_channels' in arch:  # mmpretrain's spelling
        arch['mlp_ratio'] = (
            arch.pop('feedforward_channels') / arch['embed_dims']
        )
    arch.setdefault('mlp_ratio', 4.0)
    unknown = set(arch) - {
        'embed_dims',
        'num_layers',
        'num_heads',
        'mlp_ratio',
    }
    if unknown:
        raise ValueError(f'unknown arch keys {sorted(unknown)}')
    return arch


def recognizes(state: Mapping) -> bool:
    # LayerScale ViTs (HetDPTLayerScaleViT) and windowed ViTs
    # (HetDPTWindowedViT: SAM, ViTDet) are their own families.
    return (
        (
            vit_state_dict.is_vit_state_dict(state)
            or vit_state_dict.is_openmmlab_vit_state_dict(state)
        )
        and not vit_state_dict.has_layer_scale(state)
        and not vit_state_dict.has_window_keys(state)
    )


def canonical_state(state: Mapping) -> Mapping:
    return vit_state_dict.canonical_layout(state)


#: The family's tensor surgery.
convert_state_dict = vit_state_dict.convert_state_dict


def record_from_tensors(
    state: Mapping, source: str, family: str = 'vit'
) -> HetDPTRecord:
    """The record that the key names of ``state`` imply."""
    layout = vit_state_dict.infer_layout(state)
    depth = layout['depth']
    semantics = dict(RELEASED_SEMANTICS)
    if layout['whole_branch']:
        semantics['removed_attn_output'] = WHOLE_BRANCH
    common = dict(
        family=family, source=source, origin='tensors', semantics=semantics
    )
    if layout['gated']:
        return HetDPTRecord(
            spec=vit_state_dict.gate_spec(state, depth), form='gated', **common
        )
    removed = dict(
        attn_removed=layout['attn_missing'], ffn_removed=layout['ffn_missing']
    )
    if layout['merged']:
        return HetDPTRecord(
            spec=PruneSpec(depth, act_removed=layout['merged'], **removed),
            form='merged',
            **common,
        )
    return HetDPTRecord(
        spec=PruneSpec(depth, **removed),
        form='pruned',
        act_unknown=bool(layout['attn_missing']),
        **common,
    )


def check_record(record: HetDPTRecord, state: Mapping) -> None:
    """Raise :class:`CheckpointError` when the tensors contradict the
    record."""
    layout = vit_state_dict.infer_layout(state)
    spec = record.spec
    problems = []
    if layout['depth'] != spec.depth:
        problems.append(
            f'{layout["depth"]} blocks of weights for a '
            f'{spec.depth}-block spec'
        )
    elif record.form == 'gated':
        gates = vit_state_dict.gate_spec(state, spec.depth)
        if not layout['gated']:
            problems.append('no gate tensors in a gated record')
        elif gates != spec:
            problems.append(f'its closed gates say {gates}')
    else:
        merged = list(spec.act_removed) if record.form == 'merged' else []
        if layout['attn_missing'] != list(spec.attn_removed):
            problems.append(
                f'attention weights are missing for blocks '
                f'{layout["attn_missing"]}, the record removes '
                f'{list(spec.attn_removed)}'
            )
        if layout['merged'] != merged:
            problems.append(
                f'merged FFNs are in blocks {layout["merged"]}, the '
                f'record expects {merged}'
            )
        if layout['ffn_missing'] != list(spec.ffn_removed):
            problems.append(
                f'FFN branches are missing in blocks '
                f'{layout["ffn_missing"]}, the record removes '
                f'{list(spec.ffn_removed)}'
            )
    if problems:
        raise CheckpointError(
            f'{record.source}: the record does not match the tensors: '
            + '; '.join(problems)
        )


def build_args_from_tensors(
    state: Mapping, arch: Optional[Mapping] = None
) -> Dict:
    """Everything is read from tensor shapes except the number of heads,
    which comes from ``arch`` (a preset, an arch dict, or a record's
    build args) or from the preset with the same width, depth and MLP
    ratio."""
    if isinstance(arch, Mapping) and 'arch' in arch:
        arch = arch['arch']
    pos_embed = state['pos_embed']
    proj = state['patch_embed.proj.weight']
    dim = int(pos_embed.shape[-1])
    depth = vit_state_dict.infer_layout(state)['depth']
    fc1 = [v for k, v in state.items() if k.endswith('mlp.fc1.weight')]
    mlp_ratio = fc1[0].shape[0] / dim if fc1 else None
    with_cls = 'cls_token' in state
    distilled = 'dist_token' in state
    num_patches = pos_embed.shape[1] - int(with_cls) - int(distilled)
    side = math.isqrt(num_patches)
    if side * side != num_patches:
        raise CheckpointError(
            f'pos_embed has {num_patches} patch positions, not a square grid'
        )
    if not arch:
        matches = [
            dict(p)
            for p in ARCH_PRESETS.values()
            if p['embed_dims'] == dim
            and p['num_layers'] == depth
            and mlp_ratio in (None, p['mlp_ratio'])
        ]
        if not matches:
            raise ValueError(f'width {dim}, {depth} blocks: give --arch')
        arch = matches[0]
    arch = resolve_arch(arch)
    if arch['embed_dims'] != dim or arch['num_layers'] != depth:
        raise CheckpointError(f'arch {arch}: not {dim} wide, {depth} deep')
    if mlp_ratio is not None:
        arch['mlp_ratio'] = mlp_ratio
    patch = int(proj.shape[-1])
    return dict(
        arch=arch,
        img_size=(side * patch, side * patch),
        patch_size=patch,
        in_channels=int(proj.shape[1]),
        distilled=distilled,
        with_cls_token=with_cls,
        qkv_bias=any(k.endswith('attn.qkv.bias') for k in state),
        final_norm='norm.weight' in state,
        **({'out_type': 'avg_featmap'} if 'fc_norm.weight' in state else {}),
        **({} if 'patch_embed.proj.bias' in state else {'patch_bias': False}),
        **embedding_norms(state),
    )


def embedding_norms(state: Mapping) -> Dict:
    """``pre_norm`` / ``patch_norm`` where the tensors have those norms
    (only then: other records keep their keys)."""
    return {
        name: True
        for name, key in (
            ('pre_norm', 'norm_pre.weight'),
            ('patch_norm', 'patch_embed.norm.weight'),
        )
        if key in state
    }


arch_settings = resolve_arch


def arch_depth(arch) -> int:
    return resolve_arch(arch)['num_layers']


def layer_macs(
    arch: Mapping, img_size, attention_products: bool = True
) -> Dict[str, object]:
    """MACs per block of a ViT of build arguments ``arch``."""
    settings = resolve_arch(arch['arch'])
    cost = AnalyticCost.from_build_args(
        dict(arch, arch=settings), img_size, attention_products
    )
    depth = settings['num_layers']
    return dict(
        attn=[cost.attention_macs] * depth,
        ffn=[cost.ffn_macs] * depth,
        merged_ffn=[cost.merged_ffn_macs] * depth,
        rest=cost.patch_embed_macs,
    )
