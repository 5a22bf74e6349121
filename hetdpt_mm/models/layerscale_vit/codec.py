"""The LayerScale ViT family's codec (DeiT-III, DINOv2): its architecture
tables, which tensors are its, the build arguments they say and the MACs
per block, as functions apart from the module; what its per-block keys say
(a record), their check and the tensor surgery are the ViT family's
(:mod:`..vit.codec`), which folds ``ls2.gamma`` into a merged FFN.  Its
checkpoint layouts: :mod:`.state_dict`."""

import functools
import math
from typing import Dict, Mapping, Optional, Union

from ...errors import CheckpointError
from ...pruning.cost import AnalyticCost
from ..vit import codec as vit_codec
from ..vit import state_dict as vit_state_dict
from ..vit.codec import resolve_arch
from . import state_dict as ls_state_dict

#: FFN kinds: timm's ``Mlp`` (GELU) or DINOv2-g's packed SwiGLU.
FFN_TYPES = ('mlp', 'swiglu')


def _preset(
    embed_dims,
    num_layers,
    num_heads,
    *,
    patch_size,
    img_size,
    layer_scale_init_value,
    mlp_ratio=4.0,
    ffn='mlp',
    reg_tokens=0,
    no_embed_class=False,
) -> Dict:
    return dict(
        arch=dict(
            embed_dims=embed_dims,
            num_layers=num_layers,
            num_heads=num_heads,
            mlp_ratio=mlp_ratio,
            ffn=ffn,
        ),
        patch_size=patch_size,
        img_size=img_size,
        layer_scale_init_value=layer_scale_init_value,
        reg_tokens=reg_tokens,
        no_embed_class=no_embed_class,
    )


_DEIT3 = dict(
    patch_size=16,
    img_size=224,
    layer_scale_init_value=1e-6,
    no_embed_class=True,
)
_DINOV2 = dict(patch_size=14, img_size=518, layer_scale_init_value=1e-5)
_REG4 = dict(_DINOV2, reg_tokens=4, no_embed_class=True)
#: DINOv2-g: timm's packed SwiGLU, hidden 2 x 4096 (``fc1`` 1536 -> 8192).
_GIANT = dict(mlp_ratio=2.66667 * 2, ffn='swiglu')
#: timm's models of the same names (``deit3_*_patch16_224``,
#: ``deit3_huge_patch14_224``, ``vit_*_patch14_dinov2``,
#: ``vit_*_patch14_reg4_dinov2``).
LAYERSCALE_ARCH_PRESETS = {
    'deit3-small': _preset(384, 12, 6, **_DEIT3),
    'deit3-medium': _preset(512, 12, 8, **_DEIT3),
    'deit3-base': _preset(768, 12, 12, **_DEIT3),
    'deit3-large': _preset(1024, 24, 16, **_DEIT3),
    'deit3-huge': _preset(1280, 32, 16, **dict(_DEIT3, patch_size=14)),
    'dinov2-small': _preset(384, 12, 6, **_DINOV2),
    'dinov2-base': _preset(768, 12, 12, **_DINOV2),
    'dinov2-large': _preset(1024, 24, 16, **_DINOV2),
    'dinov2-giant': _preset(1536, 40, 24, **_GIANT, **_DINOV2),
    'dinov2-small-reg4': _preset(384, 12, 6, **_REG4),
    'dinov2-base-reg4': _preset(768, 12, 12, **_REG4),
    'dinov2-large-reg4': _preset(1024, 24, 16, **_REG4),
    'dinov2-giant-reg4': _preset(1536, 40, 24, **_GIANT, **_REG4),
}
#: Model settings of an arch given as a dict.
DICT_ARCH_DEFAULTS = dict(
    patch_size=16,
    img_size=224,
    layer_scale_init_value=1e-5,
    reg_tokens=0,
    no_embed_class=False,
)


def resolve_layerscale_arch(arch: Union[str, Mapping]) -> Dict:
    """Block shapes of a preset or an arch dict (the ViT's keys and
    ``ffn``: ``'mlp'`` or ``'swiglu'``)."""
    if isinstance(arch, str) and arch not in LAYERSCALE_ARCH_PRESETS:
        raise ValueError(f'unknown arch {arch!r} (docs/user_guides/dinov2.md)')
    if isinstance(arch, str):
        arch = LAYERSCALE_ARCH_PRESETS[arch]['arch']
    arch = dict(arch)
    ffn = arch.pop('ffn', 'mlp')
    if ffn not in FFN_TYPES:
        raise ValueError(f'arch ffn must be one of {FFN_TYPES}, got {ffn!r}')
    return dict(resolve_arch(arch), ffn=ffn)


def mmpretrain_swiglu(shape: Mapping) -> Dict:
    """The shape of mmpretrain's ``layer_cfgs=dict(ffn_type='swiglu_fused')``
    for an arch of ``feedforward_channels`` F: SwiGLUFFNFused's hidden width
    ``H = ceil8(2F/3)``, packed as timm's (``fc1``: ``D -> 2H``)."""
    dim = shape['embed_dims']
    hidden = (int(shape['mlp_ratio'] * dim * 2 / 3) + 7) // 8 * 8
    return dict(shape, mlp_ratio=2 * hidden / dim, ffn='swiglu')


#: Per-block keys say what a ViT's do: the ViT family reads them.
record_from_tensors = functools.partial(
    vit_codec.record_from_tensors, family='layerscale_vit'
)
check_record = vit_codec.check_record
convert_state_dict = vit_codec.convert_state_dict


def recognizes(state: Mapping) -> bool:
    return (
        vit_state_dict.is_vit_state_dict(state)
        or vit_state_dict.is_openmmlab_vit_state_dict(state)
    ) and vit_state_dict.has_layer_scale(state)


def canonical_state(state: Mapping) -> Mapping:
    return ls_state_dict.canonical_layout(
        vit_state_dict.canonical_layout(state)
    )


def build_args_from_tensors(
    state: Mapping, arch: Optional[Mapping] = None
) -> Dict:
    """Everything is read from tensor shapes except the number of heads,
    which comes from ``arch`` (a preset, an arch dict, or a record's
    build args) or from a preset with the same width, depth and FFN."""
    if isinstance(arch, Mapping) and 'arch' in arch:
        arch = arch['arch']
    proj = state['patch_embed.proj.weight']
    dim = int(proj.shape[0])
    depth = vit_state_dict.infer_layout(state)['depth']
    fc1 = next((k for k in state if k.endswith('mlp.fc1.weight')), None)
    found = {}
    if fc1 is not None:
        hidden = state[fc1].shape[0]
        fc2_in = state[fc1.replace('fc1', 'fc2')].shape[1]
        found = dict(
            ffn='swiglu' if 2 * fc2_in == hidden else 'mlp',
            mlp_ratio=hidden / dim,
        )
    if not arch:
        matches = [
            dict(p['arch'])
            for p in LAYERSCALE_ARCH_PRESETS.values()
            if p['arch']['embed_dims'] == dim
            and p['arch']['num_layers'] == depth
            and found.get('ffn', p['arch']['ffn']) == p['arch']['ffn']
        ]
        if not matches:
            raise ValueError(f'no preset of width {dim}: give --arch')
        arch = matches[0]
    arch = dict(resolve_layerscale_arch(arch), **found)
    if arch['embed_dims'] != dim or arch['num_layers'] != depth:
        raise CheckpointError(f'arch is not of width {dim}, depth {depth}')
    positioned = ls_state_dict.positioned_prefix_tokens(state)
    side = math.isqrt(state['pos_embed'].shape[1] - positioned)
    patch = int(proj.shape[-1])
    reg = state['reg_token'].shape[1] if 'reg_token' in state else 0
    return dict(
        arch=arch,
        img_size=(side * patch, side * patch),
        patch_size=patch,
        in_channels=int(proj.shape[1]),
        reg_tokens=int(reg),
        no_embed_class=positioned == 0,
        distilled=False,
        with_cls_token='cls_token' in state,
        qkv_bias=any(k.endswith('attn.qkv.bias') for k in state),
        final_norm='norm.weight' in state,
        **vit_codec.embedding_norms(state),
    )


arch_settings = resolve_layerscale_arch


def arch_depth(arch) -> int:
    return resolve_layerscale_arch(arch)['num_layers']


def layer_macs(
    arch: Mapping, img_size, attention_products: bool = True
) -> Dict[str, object]:
    """The ViT's count over the class and register tokens; a packed
    SwiGLU FFN (``D -> 2H``, ``H -> D``) costs 3/4 of a GELU FFN of
    hidden width ``2H``."""
    settings = resolve_layerscale_arch(arch['arch'])
    cost = AnalyticCost(
        embed_dim=settings['embed_dims'],
        num_heads=settings['num_heads'],
        mlp_ratio=settings['mlp_ratio'],
        depth=settings['num_layers'],
        img_size=tuple(img_size),
        patch_size=arch['patch_size'],
        in_chans=arch['in_channels'],
        num_prefix_tokens=int(arch['with_cls_token']) + arch['reg_tokens'],
        attention_products=attention_products,
    )
    ffn_macs = cost.ffn_macs * (0.75 if settings['ffn'] == 'swiglu' else 1.0)
    depth = settings['num_layers']
    return dict(
        attn=[cost.attention_macs] * depth,
        ffn=[ffn_macs] * depth,
        merged_ffn=[cost.merged_ffn_macs] * depth,
        rest=cost.patch_embed_macs,
    )
