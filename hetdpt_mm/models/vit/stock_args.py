"""The constructor arguments of mmseg's and mmpretrain's
``VisionTransformer`` for the ViT families, with the stock meaning, so that
changing ``type`` in a stock config is enough (docs/advanced/backbone.md,
*Stock ViT arguments*).  What has no counterpart in a DeiT/ViT whose layers
HetDPT removes is an error naming what to write instead."""

from typing import (
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Set,
    Tuple,
    Union,
)

import torch.nn as nn

from ...presets import ARCH_PRESETS
from ...registry import (
    constructor_keywords,
    did_you_mean,
    unexpected_keywords_message,
)
from .state_dict import openmmlab_name

#: What the backbone returns per output (mmpretrain's ``out_type``).
OUT_TYPES = ('cls_token', 'featmap', 'avg_featmap', 'raw')
#: The LayerNorm epsilon of DeiT / timm (and of mmpretrain's ViT).
DEFAULT_NORM_EPS = 1e-6
#: mmseg's spelling of the architecture, with its defaults.
MMSEG_ARCH_ARGS = dict(
    embed_dims=768, num_layers=12, num_heads=12, mlp_ratio=4
)
#: Stock arguments that must keep their stock default here, and what the
#: error suggests instead.
FIXED_ARGS = {
    'act_cfg': (
        dict(type='GELU'),
        'HetDPT removes the FFN GELUs: the activation is GELU',
    ),
    'num_fcs': (2, 'the FFN has two linear layers (HetDPT merges them)'),
    'patch_pad': (
        'corner',
        "inputs of any size are padded at the bottom and right ('corner')",
    ),
    'layer_scale_init_value': (
        0.0,
        "LayerScale ViTs (DeiT-III, DINOv2) are type='HetDPTLayerScaleViT' "
        "(not masked-image pretraining: mmpretrain's BEiTPretrainViT, whose "
        'forward takes a mask, has no counterpart here)',
    ),
    'layer_cfgs': (
        {},
        "blocks are configured by the backbone's own "
        'arguments (drop_rate, attn_drop_rate, drop_path_rate, '
        "qkv_bias, norm_cfg); a SwiGLU FFN is type='HetDPTLayerScaleViT' "
        "with layer_cfgs=dict(ffn_type='swiglu_fused') (mmpretrain's) or "
        "ffn='swiglu' in its arch",
    ),
    'patch_cfg': (
        {},
        'the patch embedding is configured by patch_size, '
        'in_channels, img_size and patch_norm',
    ),
}

#: Stock backbones that have no counterpart here, told by their arguments.
UNSUPPORTED_BACKBONES = {
    'mask_ratio': "mmpretrain's MAEViT is masked-image pretraining (its "
    'forward takes a mask), which HetDPT does not prune; load MAE-pretrained '
    "weights into type='HetDPTViT' with mmpretrain's VisionTransformer "
    "arguments (as its MAE fine-tuning configs: out_type='avg_featmap')",
    **dict.fromkeys(
        ('use_abs_pos_emb', 'use_rel_pos_bias', 'use_shared_rel_pos_bias'),
        "mmpretrain's BEiTViT and BEiTPretrainViT have relative position "
        'biases (and BEiTPretrainViT masked-image pretraining), which the '
        "ViTs here do not; supported are mmpretrain's / mmseg's "
        "VisionTransformer (type='HetDPTViT') and LayerScale ViTs with "
        "absolute positions, DeiT-III and DINOv2 (type='HetDPTLayerScaleViT')",
    ),
    'init_values': "mmseg's BEiT and MAE have a relative position bias in "
    'every attention, which the ViTs here do not (MAE-pretrained weights '
    "load into type='HetDPTViT' with mmseg's VisionTransformer arguments); "
    "timm's init_values of a LayerScale ViT (DeiT-III, DINOv2) is "
    "type='HetDPTLayerScaleViT' with layer_scale_init_value",
}


#: The defaults of a toolbox's ``VisionTransformer`` where they differ from
#: ours, applied when that toolbox's registry builds a ViT family (mmseg's
#: gives feature maps, without a final norm or patch-embedding bias, and
#: mmcv's LayerNorm eps 1e-5); mmpretrain's are ours.
TOOLBOX_DEFAULTS = {
    'mmseg': dict(
        out_type='featmap',
        final_norm=False,
        patch_bias=False,
        norm_cfg=dict(type='LN'),
    )
}

#: Logged when mmseg's registry builds a ViT family: the one way a swapped
#: stock mmseg config trains otherwise (mmengine matches custom_keys to
#: parameter names).
MMSEG_NORM_NAMES = (
    "{}: its LayerNorms are timm's blocks.N.norm1 / norm2 (mmseg's ViT: "
    "layers.N.ln1 / ln2), so a paramwise_cfg custom key 'norm' (mmseg's ViT "
    "configs) exempts them from weight decay here, and in mmseg's ViT only "
    "patch_embed.norm; to train as mmseg's ViT, write that key as "
    "'patch_embed.norm'"
)


def arch_from_stock(
    arch: Union[str, Mapping], default_arch, stock: Dict
) -> Union[str, Dict]:
    """``arch`` of our spelling from mmseg's ``embed_dims``,
    ``num_layers``, ``num_heads``, ``mlp_ratio`` (popped from ``stock``)
    or an mmpretrain arch name (``'base'``, ``'deit-b'``, ...)."""
    given = {
        name: stock.pop(name) for name in MMSEG_ARCH_ARGS if name in stock
    }
    if given:
        if arch != default_arch:
            raise ValueError(
                f'give the architecture once: arch={arch!r} or {sorted(given)}'
            )
        return {**MMSEG_ARCH_ARGS, **given}
    return arch


def mmpretrain_arch(name: str) -> Optional[Dict]:
    """mmpretrain's ViT arch of ``name`` (``'b'``, ``'base'``,
    ``'deit-b'``, ...) in our spelling, or ``None``."""
    from mmpretrain.models.backbones.vision_transformer import (
        VisionTransformer,
    )

    settings = VisionTransformer.arch_zoo.get(name.lower())
    if settings is None:
        return None
    return dict(
        embed_dims=settings['embed_dims'],
        num_layers=settings['num_layers'],
        num_heads=settings['num_heads'],
        mlp_ratio=settings['feedforward_channels'] / settings['embed_dims'],
    )


def unknown_arch_message(name: str, presets: Iterable[str]) -> str:
    """What an arch name that is neither one of ``presets`` nor
    mmpretrain's is told: every accepted name, and the closest."""
    from mmpretrain.models.backbones.vision_transformer import (
        VisionTransformer,
    )

    accepted = sorted(set(presets) | set(VisionTransformer.arch_zoo))
    return (
        f'unknown arch {name!r}{did_you_mean(name, accepted)}; choose one '
        f'of {accepted} or pass a dict'
    )


def backbone_keywords(owner: type) -> Set[str]:
    """The named arguments of ``owner``'s constructors and the stock ones
    it takes."""
    return (
        constructor_keywords(owner)
        | set(MMSEG_ARCH_ARGS)
        | set(FIXED_ARGS)
        | {
            'norm_cfg',
            'frozen_exclude',
            'out_origin',
        }
    )


def check_fixed_args(stock: Dict) -> None:
    for name, (value, reason) in FIXED_ARGS.items():
        if name in stock and stock.pop(name) != value:
            raise ValueError(f'{name} must be {value!r} here: {reason}')


def norm_eps(norm_cfg: Optional[Mapping]) -> float:
    """The LayerNorm epsilon of an mmcv ``norm_cfg`` (only LayerNorm)."""
    if norm_cfg is None:
        return DEFAULT_NORM_EPS
    cfg = dict(norm_cfg)
    if cfg.pop('type', 'LN') not in ('LN', 'LayerNorm', nn.LayerNorm):
        raise ValueError(
            f"norm_cfg={dict(norm_cfg)!r}: the ViT's norms are "
            "LayerNorms: norm_cfg=dict(type='LN', eps=...)"
        )
    eps = cfg.pop('eps', 1e-5)  # mmcv's LayerNorm default
    if cfg.pop('requires_grad', True) is not True or cfg:
        raise ValueError(
            f'norm_cfg={dict(norm_cfg)!r}: only type and eps are supported'
        )
    return float(eps)


def take_stock_args(
    arch, default_arch, stock: Dict, owner: type
) -> Tuple[Union[str, Dict], Dict]:
    """Our ``arch`` (also from mmpretrain's arch names) and the stock
    arguments that remain (``norm_cfg``, ``frozen_exclude``,
    ``out_origin``) from the stock ones in ``stock``; any other name is a
    ``TypeError`` naming ``owner`` (the backbone class) and the closest
    argument it takes."""
    stock = dict(stock)
    arch = arch_from_stock(arch, default_arch, stock)
    if isinstance(arch, str) and arch not in ARCH_PRESETS:
        name, arch = arch, mmpretrain_arch(arch)  # 'base', 'deit-b', ...
        if arch is None:
            raise ValueError(unknown_arch_message(name, ARCH_PRESETS))
    unsupported = sorted(set(stock) & set(UNSUPPORTED_BACKBONES))
    if unsupported:
        raise TypeError(
            f'{owner.__name__} does not take {unsupported}: '
            f'{UNSUPPORTED_BACKBONES[unsupported[-1]]}'
        )
    check_fixed_args(stock)
    kept = {
        name: stock.pop(name)
        for name in ('norm_cfg', 'frozen_exclude', 'out_origin')
        if name in stock
    }
    if stock:
        raise TypeError(
            unexpected_keywords_message(
                owner.__name__, stock, backbone_keywords(owner)
            )
        )
    return arch, kept


def check_output_args(
    out_type: str,
    with_cls_token: bool,
    output_cls_token: bool,
    distilled: bool,
) -> None:
    """Refuse outputs (mmpretrain's ``out_type``, mmseg's
    ``output_cls_token``) and tokens that do not go together."""
    if out_type not in OUT_TYPES:
        raise ValueError(
            f'unknown out_type {out_type!r}; choose one of {OUT_TYPES}'
        )
    if out_type == 'cls_token' and not with_cls_token:
        raise ValueError('out_type="cls_token" needs with_cls_token=True')
    if output_cls_token and not with_cls_token:
        raise ValueError('output_cls_token=True needs with_cls_token=True')
    if distilled and not with_cls_token:
        raise ValueError('a distilled ViT needs with_cls_token=True')


def block_indices(
    out_indices: Union[int, Sequence[int]], depth: int
) -> List[int]:
    """``out_indices`` (an index or a list; negative from the last block)
    as block indices."""
    if isinstance(out_indices, int):
        out_indices = [out_indices]
    resolved = []
    for index in out_indices:
        block = index + depth if index < 0 else index
        if not 0 <= block < depth:
            raise ValueError(
                f'out_indices entry {index} is out of range for {depth} blocks'
            )
        resolved.append(block)
    return resolved


def structural_args(
    eps: float,
    out_type: str,
    pre_norm: bool,
    patch_norm: bool,
    patch_bias: bool,
) -> Dict:
    """The build arguments these add to a record, only where they differ
    from a DeiT's (so that other records keep their keys): the norms'
    epsilon, ``out_type='avg_featmap'``, whose ``fc_norm`` is part of the
    network, the norms before the blocks and in the patch embedding, and
    a patch embedding without bias."""
    args = (
        {}
        if eps == DEFAULT_NORM_EPS
        else dict(norm_cfg=dict(type='LN', eps=eps))
    )
    if out_type == 'avg_featmap':
        args['out_type'] = out_type
    if not patch_bias:
        args['patch_bias'] = False
    args.update(
        {
            name: True
            for name, given in (
                ('pre_norm', pre_norm),
                ('patch_norm', patch_norm),
            )
            if given
        }
    )
    return args


def frozen_by_exclude(module: nn.Module, frozen_exclude) -> None:
    """mmseg's ``frozen_exclude``: freeze every parameter whose mmseg name
    (:func:`~.vit_state_dict.openmmlab_name`) contains none of its
    strings, unless it holds ``'all'``."""
    if frozen_exclude is None or 'all' in frozen_exclude:
        return
    for name, param in module.named_parameters():
        stock_name = openmmlab_name(name)
        if not any(exclude in stock_name for exclude in frozen_exclude):
            param.requires_grad_(False)
