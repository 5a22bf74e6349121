"""The stock windowed ViTs' constructor arguments read as
HetDPTWindowedViT's, so that a stock config builds it with only ``type``
changed (docs/user_guides/sam_vitdet.md): mmpretrain's ``ViTSAM`` (the
family's own arguments, mmpretrain's defaults from its registry) and
mmdet's ViTDet ``ViT`` (``projects/ViTDet``, timm-style arguments), built
by ``backbone.build_vitdet`` as ``type='HetDPTViTDet'``."""

from typing import Dict

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
