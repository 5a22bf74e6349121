from timm.layers import LayerNorm2d

from ..presets import ARCH_PRESETS
from ..registry import (
    FAMILIES,
    TOOLBOX_FALLBACKS,
    TOOLBOX_MODULES,
    get_family,
)
from . import heads  # noqa: F401  registers PretrainedHeads
from .family import HetDPTBackbone
from .layerscale_vit.backbone import HetDPTLayerScaleViT
from .layerscale_vit.codec import LAYERSCALE_ARCH_PRESETS
from .layerscale_vit.stock_args import build_deit3
from .swin.backbone import HetDPTSwin
from .swin.stock_args import SWIN_ARCH_PRESETS
from .vit.backbone import HetDPTViT
from .vit.state_dict import convert_state_dict, merge_ffn_weights
from .windowed_vit.backbone import HetDPTWindowedViT, build_vitdet
from .windowed_vit.codec import WINDOWED_ARCH_PRESETS

__all__ = [
    'ARCH_PRESETS',
    'FAMILIES',
    'HetDPTBackbone',
    'HetDPTLayerScaleViT',
    'HetDPTSwin',
    'HetDPTViT',
    'HetDPTWindowedViT',
    'LAYERSCALE_ARCH_PRESETS',
    'SWIN_ARCH_PRESETS',
    'WINDOWED_ARCH_PRESETS',
    'convert_state_dict',
    'get_family',
    'merge_ffn_weights',
]


def build_fused_attention_detr(**kwargs):
    """Builds :class:`~hetdpt_mm.models.fused_attention.FusedAttentionDETR`,
    importing mmdet's detectors only when a config asks for one."""
    from .fused_attention import FusedAttentionDETR

    return FusedAttentionDETR(**kwargs)


TOOLBOX_MODULES.setdefault('mmdet', {})['FusedAttentionDETR'] = (
    build_fused_attention_detr
)
# mmpretrain's DeiT3 (mmdet / mmseg configs reach it as mmpretrain's).
TOOLBOX_MODULES.setdefault('mmpretrain', {})['HetDPTDeiT3'] = build_deit3
# mmdet's ViTDet backbone (projects/ViTDet, not in mmdet's wheel).
TOOLBOX_MODULES['mmdet']['HetDPTViTDet'] = build_vitdet


def build_simple_fpn(**kwargs):
    """Builds :class:`~hetdpt_mm.models.simple_fpn.SimpleFPN`, importing
    mmcv's conv modules only when a config asks for one."""
    from .simple_fpn import SimpleFPN

    return SimpleFPN(**kwargs)


# ViTDet's neck and its norm, where mmdet lacks them (its projects/ViTDet
# registers its own when imported first).
TOOLBOX_FALLBACKS['mmdet'] = dict(SimpleFPN=build_simple_fpn, LN2d=LayerNorm2d)


def toolbox_builder(family, toolbox: str):
    """What ``toolbox``'s registry builds for ``type='<family>'``: the
    family with that toolbox's defaults under the config's arguments."""

    def build(**kwargs):
        return family(**family.toolbox_args(toolbox, kwargs))

    build.__name__ = build.__qualname__ = f'{family.__name__}_{toolbox}'
    return build


# Registered after the families (registry.register_all_modules): each
# toolbox's registry builds a family with that toolbox's defaults.
for _family in FAMILIES.values():
    for _toolbox in _family.TOOLBOX_DEFAULTS:
        TOOLBOX_MODULES.setdefault(_toolbox, {})[_family.__name__] = (
            toolbox_builder(_family, _toolbox)
        )
