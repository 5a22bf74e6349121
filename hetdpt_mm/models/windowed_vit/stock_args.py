"""The stock windowed ViTs' constructor arguments read as
HetDPTWindowedViT's, so that a stock config builds it with only ``type``
changed (docs/user_guides/sam_vitdet.md): mmpretrain's ``ViTSAM`` (the
family's own arguments, mmpretrain's defaults from its registry) and
mmdet's ViTDet ``ViT`` (``projects/ViTDet``, timm-style arguments), built
by :func:`build_vitdet` as ``type='HetDPTViTDet'``."""

from typing import Dict, Mapping, Optional, Sequence

from ...registry import constructor_keywords, unexpected_keywords_message
from ..vit.stock_args import norm_eps

#: mmpretrain's ``ViTSAM`` arguments that must keep their default here.
FIXED_ARGS = {
    'patch_cfg': ({}, 'give patch_size, in_channels'),
    'layer_cfgs': ({}, 'give window_size, arch, qkv_bias, norm_cfg'),
}
#: The defaults of mmpretrain's ``ViTSAM`` where they differ from ours
#: (its position embedding resamples without antialiasing).
TOOLBOX_DEFAULTS = {
    'mmpretrain': dict(img_size=224, pos_embed_antialias=False),
}


def read_stock_args(stock: Dict, owner: type) -> float:
    """The LayerNorm epsilon of ``norm_cfg`` (mmpretrain's default: 1e-6)
    from the stock arguments in ``stock``; fixed ones keep their default,
    any other name is a ``TypeError`` naming ``owner``."""
    stock = dict(stock)
    for name, (value, reason) in FIXED_ARGS.items():
        if name in stock and stock.pop(name) != value:
            raise ValueError(f'{name} must be {value!r} here: {reason}')
    eps = norm_eps(stock.pop('norm_cfg', None))
    if stock:
        known = constructor_keywords(owner) | set(FIXED_ARGS) | {'norm_cfg'}
        raise TypeError(
            unexpected_keywords_message(owner.__name__, stock, known)
        )
    return eps


def build_vitdet(
    img_size: int = 1024,
    patch_size: int = 16,
    in_chans: int = 3,
    embed_dim: int = 768,
    depth: int = 12,
    num_heads: int = 12,
    mlp_ratio: float = 4.0,
    qkv_bias: bool = True,
    drop_path_rate: float = 0.0,
    norm_cfg: Optional[Mapping] = None,
    act_cfg: Optional[Mapping] = None,
    use_abs_pos: bool = True,
    use_rel_pos: bool = False,
    rel_pos_zero_init: bool = True,
    window_size: int = 0,
    window_block_indexes: Sequence[int] = (0, 1, 3, 4, 6, 7, 9, 10),
    pretrain_img_size: int = 224,
    pretrain_use_cls_token: bool = True,
    **hetdpt_args,
):
    """A :class:`~.backbone.HetDPTWindowedViT` of the arguments of mmdet's
    ViTDet ``ViT`` (``projects/ViTDet``): the last block's map, no neck, the
    position embedding of ``pretrain_img_size`` resampled to the input as
    ViTDet does; ``pretrain_use_cls_token`` only names the layout of the
    weights it loads, which every layout here reads.  ``hetdpt_args``:
    the family's own (``prune_spec``, ``merged``, ``out_indices``,
    ``init_cfg``, ...)."""
    from .backbone import HetDPTWindowedViT

    if dict(act_cfg or dict(type='GELU')) != dict(type='GELU'):
        raise ValueError(f'act_cfg={act_cfg!r}: HetDPT builds GELU only')
    if not rel_pos_zero_init:  # as ViTDet from MAE weights
        raise ValueError('rel_pos_zero_init=False: the tables start at zero')
    windowed = set(window_block_indexes) if window_size else set()
    hetdpt_args.setdefault('out_channels', 0)
    hetdpt_args.setdefault('pos_embed_antialias', False)
    return HetDPTWindowedViT(
        arch=dict(
            embed_dims=embed_dim,
            num_layers=depth,
            num_heads=num_heads,
            mlp_ratio=mlp_ratio,
            global_attn_indexes=[i for i in range(depth) if i not in windowed],
        ),
        img_size=img_size,
        patch_size=patch_size,
        in_channels=in_chans,
        window_size=window_size,
        pretrain_img_size=pretrain_img_size,
        qkv_bias=qkv_bias,
        drop_path_rate=drop_path_rate,
        norm_cfg=dict(type='LN', eps=1e-6) if norm_cfg is None else norm_cfg,
        use_abs_pos=use_abs_pos,
        use_rel_pos=use_rel_pos,
        **hetdpt_args,
    )


build_vitdet.__name__ = build_vitdet.__qualname__ = 'HetDPTViTDet'
