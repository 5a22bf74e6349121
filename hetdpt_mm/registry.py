"""Registration of hetdpt_mm's modules in the OpenMMLab registries.

The backbone is registered in the MODELS registry of every toolbox that is
installed (mmpretrain, mmdet, mmseg), so ``type='HetDPTViT'`` builds from any
of their scopes, directly or through ``custom_imports``.
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
