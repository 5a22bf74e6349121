"""mmpretrain's ``DeiT3`` backbone as ``type='HetDPTDeiT3'``: its
constructor arguments, defaults and arch names, built as a
:class:`~.backbone.HetDPTLayerScaleViT`
(docs/user_guides/dinov2.md, *mmpretrain's DeiT3*).  A name of its own,
because ``DeiT3``'s arch names overlap ``VisionTransformer``'s and its
position embedding has no class-token slot (``no_embed_class``)."""

import logging
from typing import Mapping, Optional, Union

from mmengine.logging import print_log

from .backbone import HetDPTLayerScaleViT

#: Logged at every build: the one way ours computes unlike mmpretrain 1.2's.
FFN_NORM_DIFFERENCE = (
    "HetDPTDeiT3: each block's FFN input is normed by its ln2, as in timm's "
    "and the official DeiT-III; mmpretrain 1.2's DeiT3 norms it by ln1 (its "
    "ln2 unused), so weights trained as mmpretrain's DeiT3 predict otherwise "
    'here: start from timm / official DeiT-III weights or fine-tune'
)
#: mmpretrain's ``LayerScale`` starts at 1e-5.
DEIT3_LAYER_SCALE_INIT = 1e-5


def deit3_arch(arch: Union[str, Mapping]) -> dict:
    """``DeiT3``'s arch (a name of its ``arch_zoo`` or a dict with
    ``feedforward_channels``) in our spelling, with a GELU FFN."""
    from mmpretrain.models.backbones.deit3 import DeiT3

    if isinstance(arch, str):
        arch = DeiT3.arch_zoo.get(arch.lower(), arch)
    if isinstance(arch, str):
        raise ValueError(f'unknown arch {arch!r}: {[*DeiT3.arch_zoo]}')
    arch = dict(arch)
    if 'feedforward_channels' in arch:
        arch['mlp_ratio'] = (
            arch.pop('feedforward_channels') / arch['embed_dims']
        )
    return dict(arch, ffn='mlp')


def build_deit3(
    arch: Union[str, Mapping] = 'base',
    img_size=224,
    patch_size: int = 16,
    norm_cfg: Optional[Mapping] = None,  # DeiT3's: LN, eps 1e-6
    use_layer_scale: bool = True,
    layer_cfgs: Optional[Mapping] = None,
    **kwargs,
) -> HetDPTLayerScaleViT:
    """A :class:`HetDPTLayerScaleViT` of mmpretrain's ``DeiT3`` arguments
    (the others, ``out_type``, ``prune_spec``, ...: the family's)."""
    if not use_layer_scale:
        raise ValueError("use_layer_scale=False: use type='HetDPTViT'")
    if layer_cfgs:
        raise ValueError('layer_cfgs: give qkv_bias etc. to DeiT3 itself')
    if kwargs.get('out_type') == 'avg_featmap':
        raise ValueError("DeiT3 has no avg_featmap: use out_type='featmap'")
    print_log(FFN_NORM_DIFFERENCE, logger='current', level=logging.WARNING)
    kwargs.setdefault('layer_scale_init_value', DEIT3_LAYER_SCALE_INIT)
    # DeiT3 resamples its positions without antialiasing, as mmpretrain's ViT.
    kwargs.setdefault('pos_embed_antialias', False)
    return HetDPTLayerScaleViT(
        arch=deit3_arch(arch),
        img_size=img_size,
        patch_size=patch_size,
        norm_cfg=norm_cfg,
        no_embed_class=True,
        reg_tokens=0,
        **kwargs,
    )


build_deit3.__name__ = build_deit3.__qualname__ = 'HetDPTDeiT3'
