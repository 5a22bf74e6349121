"""The models the benchmark compares: the dense, pruned and merged forms of
a backbone, the stock and HetDPT dense-prediction models, their test
batches (MACs and parameters: :mod:`hetdpt_mm.analysis`)."""

from typing import Dict, Mapping, Optional, Sequence, Union

import torch
import torch.nn as nn
from mmengine.config import Config

from hetdpt_mm.checkpoint.reader import read_backbone_checkpoint
from hetdpt_mm.models.family import HetDPTBackbone
from hetdpt_mm.models.vit.codec import resolve_arch
from hetdpt_mm.registry import get_family
from hetdpt_mm.spec import PruneSpec

#: The authors' reference DeiT-B model ("10 layers", docs/method.md section 1).
AUTHORS_SPEC = PruneSpec(
    12, attn_removed=(0, 3, 7, 8, 11), act_removed=(2, 7, 8, 10, 11)
)
#: The forms of one backbone that ``tools/benchmark.py backbone`` compares.
BACKBONE_VARIANTS = ('dense', 'pruned', 'merged')
#: The stock OpenMMLab configs the dense-prediction comparisons start from.
STOCK_CONFIGS = {
    'detr': 'mmdet::detr/detr_r50_8xb2-150e_coco.py',
    'upernet': (
        'mmseg::vit/vit_deit-b16_mln_upernet_8xb2-160k_ade20k-512x512.py'
    ),
}


# ---------------------------------------------------------------- backbones
def build_backbone_variants(
    arch: Union[str, Mapping] = 'deit-base',
    spec=AUTHORS_SPEC,
    variants: Sequence[str] = BACKBONE_VARIANTS,
    checkpoint: Optional[str] = None,
    prefix: Optional[str] = None,
    family: str = 'vit',
    **backbone_args,
) -> Dict[str, HetDPTBackbone]:
    """The dense, pruned (unmerged) and merged forms of one backbone of
    ``family`` (``'vit'``, ``'swin'``), in eval mode, in ``variants`` order.

    Without ``checkpoint`` the weights are random (speed does not depend on
    them). With one, the structure (family, arch, spec, semantics) comes
    from it as in training, ``arch`` and ``spec`` only filling in what it
    cannot say (a checkpoint without meta: its arch; removed GELUs of an
    authors' stage-2 file), and its weights go into the forms they convert
    to (a merged checkpoint cannot be unmerged: its pruned form stays
    random). ``backbone_args`` (e.g. ``img_size``, ``out_type``) override
    both.
    """
    unknown = [v for v in variants if v not in BACKBONE_VARIANTS]
    if unknown:
        raise ValueError(
            f'unknown variants {unknown}; choose from {BACKBONE_VARIANTS}'
        )
    structure = dict(arch=arch)
    pruned_args = dict(prune_spec=spec)
    stored_form = None
    backbone_class = get_family(family)
    if checkpoint is not None:
        record = read_backbone_checkpoint(
            checkpoint, prefix=prefix, mmap=True
        ).record
        backbone_class = get_family(record.family)
        stored_form = record.form
        structure = dict(record.arch or structure)
        pruned_args = dict(
            init_cfg=dict(
                type='Pretrained', checkpoint=checkpoint, prefix=prefix
            ),
            prune_spec=spec if record.act_unknown else None,
        )
    structure.update(backbone_args)
    if 'pruned' in variants or stored_form != 'merged':
        # A width-pruned merged file (HetDPT+) has no unmerged form.
        pruned = backbone_class(**structure, **pruned_args, merged=False)
        if stored_form == 'merged':
            pruned.init_cfg = None  # random: merged weights cannot be unmerged
        pruned.init_weights()
    models = {}
    for variant in variants:
        if variant == 'dense':
            model = backbone_class(**structure, merged=False)
            model.init_weights()
        elif variant == 'pruned':
            model = pruned
        elif stored_form == 'merged':
            model = backbone_class(**structure, **pruned_args)  # as stored
            model.init_weights()
        else:
            model = pruned.to_merged()
        models[variant] = model.eval()
    return models


# ------------------------------------------------- dense-prediction models
def stock_config(task: str) -> Config:
    """The stock mmdet / mmseg config of ``task`` (``'detr'`` or
    ``'upernet'``), without pretrained weights."""
    if task not in STOCK_CONFIGS:
        raise ValueError(
            f'unknown task {task!r}; choose from {sorted(STOCK_CONFIGS)}'
        )
    from mmengine.hub import get_config

    cfg = get_config(STOCK_CONFIGS[task])
    cfg.model.pop('pretrained', None)
    if task == 'detr':
        cfg.model.backbone.pop('init_cfg', None)
    return cfg


def hetdpt_config(
    task: str,
    arch: Union[str, Mapping] = 'deit-base',
    spec=AUTHORS_SPEC,
    merged: bool = True,
    img_size: Sequence[int] = (224, 224),
    distilled: bool = True,
    token_reduction: Optional[Mapping] = None,
) -> Config:
    """The stock config of ``task`` with its backbone replaced by
    :class:`HetDPTViT` (``spec=None``: dense; ``token_reduction``: its
    ``token_merge`` or ``graph_propagation`` option),
    random weights; what
    ``configs/detr_hetdpt_deit_b.py`` and
    ``configs/upernet_hetdpt_deit_b_ade20k.py`` build, minus the checkpoint.
    """
    cfg = stock_config(task)
    settings = resolve_arch(arch)
    embed_dims = settings['embed_dims']
    depth = settings['num_layers']
    backbone = dict(
        type='HetDPTViT',
        arch=arch,
        img_size=tuple(img_size),
        patch_size=16,
        distilled=distilled,
        out_type='featmap',
        prune_spec=None
        if spec is None
        else PruneSpec.coerce(spec, depth).to_dict(),
        merged=merged and spec is not None,
    )
    backbone.update(token_reduction or {})
    if task == 'detr':
        backbone.update(out_indices=(depth - 1,))
        cfg.model.type = 'FusedAttentionDETR'
        cfg.model.backbone = backbone
        cfg.model.neck.in_channels = [embed_dims]
    else:
        # mmseg's (2, 5, 8, 11) for 12 blocks: the end of each quarter.
        backbone.update(
            out_indices=tuple(depth * k // 4 - 1 for k in (1, 2, 3, 4)),
            final_norm=False,
            interpolate_mode='bicubic',
        )
        cfg.model.backbone = backbone
        # The neck maps to its own out_channels: the heads stay as they are.
        cfg.model.neck.in_channels = [embed_dims] * 4
    return cfg


def make_test_batch(
    scope: str, batch_size: int, img_size: Sequence[int]
) -> Dict[str, list]:
    """A ``test_step`` batch of random uint8 images of ``img_size`` with the
    data samples of the toolbox ``scope`` (mmdet, mmseg or mmpretrain)."""
    height, width = img_size
    shape = (height, width)
    if scope == 'mmdet':
        from mmdet.structures import DetDataSample

        samples = [
            DetDataSample(
                metainfo=dict(
                    img_shape=shape, ori_shape=shape, scale_factor=(1.0, 1.0)
                )
            )
            for _ in range(batch_size)
        ]
    elif scope == 'mmseg':
        from mmseg.structures import SegDataSample

        samples = [
            SegDataSample(
                metainfo=dict(
                    img_shape=shape,
                    ori_shape=shape,
                    pad_shape=shape,
                    padding_size=[0, 0, 0, 0],
                )
            )
            for _ in range(batch_size)
        ]
    elif scope == 'mmpretrain':
        from mmpretrain.structures import DataSample

        samples = [
            DataSample(metainfo=dict(img_shape=shape))
            for _ in range(batch_size)
        ]
    else:
        raise ValueError(
            f'cannot make test data for a model of scope '
            f'{scope!r}; expected mmdet, mmseg or mmpretrain'
        )
    generator = torch.Generator().manual_seed(0)
    images = [
        torch.randint(
            0, 256, (3, height, width), dtype=torch.uint8, generator=generator
        )
        for _ in range(batch_size)
    ]
    return dict(inputs=images, data_samples=samples)


class TensorForward(nn.Module):
    """``model(inputs, data_samples, mode='tensor')`` as a one-argument
    module, so that FlopAnalyzer can trace a detector or segmentor."""

    def __init__(self, model: nn.Module, data_samples: list):
        super().__init__()
        self.model = model
        self.data_samples = data_samples

    def forward(self, inputs: torch.Tensor):
        return self.model(inputs, self.data_samples, mode='tensor')
