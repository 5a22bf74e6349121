"""The tensor-level networks that are exported: image batch in, raw network
outputs out, as mmdeploy exports them (no data preprocessor, no
post-processing, no data samples).

* ``classifier``: an mmpretrain classifier's logits (``mode='tensor'``);
* ``backbone``: the backbone's outputs alone;
* ``detr``: an mmdet DETR's backbone, neck, transformer and head, giving the
  class scores and boxes of every decoder layer;
* ``upernet``: an mmseg encoder-decoder's backbone, neck and decode head,
  giving the segmentation logits at the decode head's resolution.

Each network is built from a config and a checkpoint: the checkpoint's
HetDPT record rebuilds the backbone's exact structure as it loads
(:mod:`hetdpt_mm.checkpoint.record`), and the neck or heads take the
embedding width it records (a width-pruned, HetDPT+, backbone), as in
``tools/test.py``.
"""

import copy
from typing import Optional, Sequence, Tuple

import torch
import torch.nn as nn
from mmengine.config import Config
from mmengine.model import revert_sync_batchnorm
from mmengine.registry import MODELS, DefaultScope

from ..runner import follow_backbone_width, load_fitting

TASKS = ('classifier', 'backbone', 'detr', 'upernet')
#: The toolbox each task's config must belong to.
TASK_SCOPES = {'classifier': 'mmpretrain', 'detr': 'mmdet', 'upernet': 'mmseg'}
#: Names of the exported outputs (the backbone's are out0, out1, ...).
OUTPUT_NAMES = {
    'classifier': ['cls_score'],
    'detr': ['all_cls_scores', 'all_bbox_preds'],
    'upernet': ['seg_logits'],
}


class ClassifierNet(nn.Module):
    """An mmpretrain classifier's logits."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.model(inputs, mode='tensor')


class BackboneNet(nn.Module):
    """A backbone's outputs, flattened into a tuple of tensors."""

    def __init__(self, backbone: nn.Module):
        super().__init__()
        self.backbone = backbone

    def forward(self, inputs: torch.Tensor) -> tuple:
        return tuple(torch.utils._pytree.tree_leaves(self.backbone(inputs)))


class DETRNet(nn.Module):
    """DETR's raw head outputs for unpadded images of the input's size."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, inputs: torch.Tensor) -> tuple:
        from mmdet.structures import DetDataSample

        # Every image fills the batch: DETR then needs no padding mask and
        # takes its positional encoding from the feature map's size.
        shape = tuple(inputs.shape[2:])
        sample = DetDataSample()
        # Not metainfo=: it deep-copies, and a traced shape's copy reaches
        # the tracer's fake tensors.
        for name in ('img_shape', 'batch_input_shape'):
            sample.set_field(shape, name, field_type='metainfo')
        return self.model._forward(inputs, [sample])


class SegmentorNet(nn.Module):
    """An mmseg encoder-decoder's decode-head logits."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.model._forward(inputs)


class AdaptiveAvgPool2dExport(nn.Module):
    """``nn.AdaptiveAvgPool2d`` in slices whose bounds are computed from the
    input size, so that an exported graph pools correctly at every size.

    The exporter turns ``adaptive_avg_pool2d`` into an average pool whose
    kernel and stride are those of the example input: wrong, silently, at
    sizes that divide differently (UperNet's pyramid pooling). The regions
    are PyTorch's (rows ``floor(i H / k)`` to ``ceil((i + 1) H / k)``); a
    region's mean is the mean over its rows of the means over its columns.
    """

    def __init__(self, output_size):
        super().__init__()
        size = nn.modules.utils._pair(output_size)
        if None in size:
            raise ValueError('an output size of None cannot export')
        self.output_size = size

    @staticmethod
    def _pool(x: torch.Tensor, dim: int, bins: int) -> torch.Tensor:
        length = x.shape[dim]
        # Non-negative operands only: ONNX integer division truncates.
        starts = [i * length // bins for i in range(bins)]
        ends = [((i + 1) * length + bins - 1) // bins for i in range(bins)]
        return torch.cat(
            [
                x.narrow(dim, start, end - start).mean(dim, keepdim=True)
                for start, end in zip(starts, ends)
            ],
            dim,
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        height, width = self.output_size
        return self._pool(self._pool(x, -2, height), -1, width)


def exportable(net: nn.Module) -> nn.Module:
    """A copy of ``net`` with the modules the exporter would specialise to
    one input size replaced by equivalent ones computed from the size."""
    net = copy.deepcopy(net)
    for name, module in list(net.named_modules()):
        if isinstance(module, nn.AdaptiveAvgPool2d):
            net.set_submodule(
                name, AdaptiveAvgPool2dExport(module.output_size)
            )
    return net


def build_from_config(cfg: Config) -> nn.Module:
    """Build ``cfg.model`` in its config's registry scope, eval mode, with
    SyncBN turned into BN (no process group in one inference process); the
    weights stay at their initialisation (``init_weights`` is not run). A
    top-level ``data_preprocessor`` (mmpretrain's configs) is the model's
    unless it has its own, as the Runner does."""
    scope = cfg.get('default_scope', 'mmengine')
    if cfg.get('custom_imports'):
        from mmengine.utils import import_modules_from_strings

        import_modules_from_strings(**cfg['custom_imports'])
    model_cfg = copy.deepcopy(cfg.model)
    if cfg.get('data_preprocessor') is not None:
        model_cfg.setdefault('data_preprocessor', cfg.data_preprocessor)
    with DefaultScope.overwrite_default_scope(scope):
        model = MODELS.build(model_cfg)
    return revert_sync_batchnorm(model).eval()


def load_model(
    config: str, checkpoint: str, cfg_options: Optional[dict] = None
) -> Tuple[nn.Module, Config]:
    """The model of ``config`` with the weights of ``checkpoint``, eval
    mode (the backbone's structure is the checkpoint's), and the config."""
    cfg = Config.fromfile(config)
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    follow_backbone_width(cfg, checkpoint)
    model = build_from_config(cfg)
    load_fitting(model, checkpoint, config, logger='silent')
    return model, cfg


def check_task(task: str, model: nn.Module, scope: Optional[str]) -> None:
    """Raise ``ValueError`` unless ``model``, of the toolbox ``scope``,
    has the network of ``task``."""
    needed = TASK_SCOPES.get(task, scope)
    if scope != needed:
        raise ValueError(f'task {task} needs a {needed} config, not {scope}')
    if task == 'detr' and not hasattr(model, 'forward_transformer'):
        raise ValueError(f'task detr needs a DETR, not {type(model).__name__}')


def build_network(
    task: str, model: nn.Module, scope: Optional[str]
) -> nn.Module:
    """The tensor network of ``task`` around a loaded ``model`` of the
    toolbox ``scope``."""
    check_task(task, model, scope)
    if task == 'classifier':
        return ClassifierNet(model).eval()
    if task == 'backbone':
        return BackboneNet(model.backbone).eval()
    if task == 'detr':
        return DETRNet(model).eval()
    return SegmentorNet(model).eval()


def output_names(task: str, count: int) -> Sequence[str]:
    if task == 'backbone':
        return [f'out{i}' for i in range(count)]
    return OUTPUT_NAMES[task]
