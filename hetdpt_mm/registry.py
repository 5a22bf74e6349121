"""Registration of hetdpt_mm's modules in the OpenMMLab registries.

The backbone is registered in the MODELS registry of every toolbox that is
installed (mmpretrain, mmdet, mmseg), so ``type='HetDPTViT'`` builds from any
of their scopes, directly or through ``custom_imports``; with mmdet,
``FusedAttentionDETR`` too.
"""
import importlib


def toolbox_model_registries():
    registries = []
    for toolbox in ('mmpretrain', 'mmdet', 'mmseg'):
        try:
            registries.append(
                importlib.import_module(f'{toolbox}.registry').MODELS)
        except ImportError:
            continue
    return registries


def register_all_modules():
    from .models import HetDPTViT
    for registry in toolbox_model_registries():
        registry.register_module(module=HetDPTViT, force=True)
    try:
        from mmdet.registry import MODELS as MMDET_MODELS
    except ImportError:
        return
    MMDET_MODELS.register_module(name='FusedAttentionDETR', force=True,
                                 module=build_fused_attention_detr)


def build_fused_attention_detr(**kwargs):
    """Builds :class:`~hetdpt_mm.models.fused_attention.FusedAttentionDETR`,
    importing mmdet's detectors only when a config asks for one."""
    from .models.fused_attention import FusedAttentionDETR
    return FusedAttentionDETR(**kwargs)
