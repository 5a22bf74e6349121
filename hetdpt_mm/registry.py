"""Registration of hetdpt_mm's modules in the OpenMMLab registries.

The backbone is registered in the MODELS registry of every toolbox that is
installed (mmpretrain, mmdet, mmseg), so ``type='HetDPTViT'``,
``type='HetDPTSwin'`` and ``type='HetDPTLayerScaleViT'`` build from any
of their scopes, directly or through ``custom_imports``; with mmdet,
``FusedAttentionDETR`` too.

hetdpt_mm's own registries hold what its pruning hooks take from a config:
layer selection policies and removal schedules.
"""
import importlib

from mmengine.registry import Registry


def build_registered(cfg: dict, registry: Registry):
    """Build ``cfg`` from ``registry`` without MMEngine's default-scope
    switch: these registries have no toolbox children, and the switch warns
    under every toolbox's scope."""
    args = dict(cfg)
    name = args.pop('type', None)
    module = registry.get(name) if isinstance(name, str) else None
    if module is None:
        raise ValueError(f'{name!r} is not a registered {registry.name}; '
                         f'use one of {sorted(registry.module_dict)}')
    return module(**args)


SELECTION_POLICIES = Registry(
    'selection policy', build_func=build_registered, scope='hetdpt_mm',
    locations=['hetdpt_mm.pruning.selection'])
REMOVAL_SCHEDULES = Registry(
    'removal schedule', build_func=build_registered, scope='hetdpt_mm',
    locations=['hetdpt_mm.pruning.schedules'])


def toolbox_model_registries():
    """The MODELS registry of each installed toolbox, by toolbox name."""
    registries = {}
    for toolbox in ('mmpretrain', 'mmdet', 'mmseg'):
        try:
            registries[toolbox] = importlib.import_module(
                f'{toolbox}.registry').MODELS
        except ImportError:
            continue
    return registries


def register_all_modules():
    from .models import HetDPTLayerScaleViT, HetDPTSwin, HetDPTViT
    registries = toolbox_model_registries()
    for registry in registries.values():
        for backbone in (HetDPTViT, HetDPTSwin, HetDPTLayerScaleViT):
            registry.register_module(module=backbone, force=True)
    if 'mmdet' in registries:
        registries['mmdet'].register_module(
            name='FusedAttentionDETR', force=True,
            module=build_fused_attention_detr)


def build_fused_attention_detr(**kwargs):
    """Builds :class:`~hetdpt_mm.models.fused_attention.FusedAttentionDETR`,
    importing mmdet's detectors only when a config asks for one."""
    from .models.fused_attention import FusedAttentionDETR
    return FusedAttentionDETR(**kwargs)
