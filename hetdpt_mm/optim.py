"""Layer-wise learning-rate decay for any model with a HetDPT backbone.

mmpretrain's ``LearningRateDecayOptimWrapperConstructor`` asks the model for
``get_layer_depth``: its classifiers pass the question on to the backbone
(:meth:`HetDPTViT.get_layer_depth`,
:meth:`HetDPTSwin.get_layer_depth`), mmdet's detectors and mmseg's
segmentors have no such method, and mmseg's own
``LayerDecayOptimizerConstructor`` only knows its BEiT / MAE / ConvNeXt
classes by name.  :class:`HetDPTLayerDecayOptimWrapperConstructor` is
mmpretrain's constructor that asks the HetDPT backbone when the model
cannot answer; it reads mmpretrain's and mmseg's ``paramwise_cfg``
(``layer_decay_rate``; mmseg's ``num_layers`` is not needed: the backbone
knows its depth).
"""

from functools import partial

from mmengine.registry import OPTIM_WRAPPER_CONSTRUCTORS
from mmpretrain.engine.optimizers import (
    LearningRateDecayOptimWrapperConstructor,
)

from .models.lookup import find_hetdpt_backbones


@OPTIM_WRAPPER_CONSTRUCTORS.register_module()
class HetDPTLayerDecayOptimWrapperConstructor(
    LearningRateDecayOptimWrapperConstructor
):
    def add_params(
        self, params, module, prefix='', get_layer_depth=None, **kwargs
    ):
        if get_layer_depth is None and not hasattr(module, 'get_layer_depth'):
            backbones = dict(find_hetdpt_backbones(module))
            if not backbones:
                raise NotImplementedError(
                    'layer decay needs get_layer_depth or a HetDPT backbone'
                )
            main = (
                'backbone.'
                if 'backbone.' in backbones
                else next(iter(backbones))
            )
            get_layer_depth = partial(
                backbones[main].get_layer_depth, prefix=main
            )
        super().add_params(params, module, prefix, get_layer_depth, **kwargs)
