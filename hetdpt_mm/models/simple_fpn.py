"""ViTDet's simple feature pyramid for mmdet, whose wheel ships it only in
``projects/ViTDet`` (not installed): a plain ViT's one map becomes the four
strides a detector's heads expect (docs/user_guides/sam_vitdet.md)."""

from typing import Optional, Sequence, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmcv.cnn import ConvModule, build_norm_layer
from mmengine.model import BaseModule


class SimpleFPN(BaseModule):
    """From one map of stride ``s``: maps of strides ``s/4`` (two 2x2
    transposed convs, a norm and a GELU between), ``s/2`` (one), ``s`` and
    ``2s`` (max pooling), each through a 1x1 lateral and a 3x3 output
    :class:`~mmcv.cnn.ConvModule`, then ``num_outs - 4`` extra levels
    subsampled from the last.  Arguments and module names are those of
    mmdet's ``projects/ViTDet`` ``SimpleFPN``, so its configs and
    checkpoints carry over; it takes the backbone's outputs as a tensor or
    as a tuple (the last map is used).

    Args:
        backbone_channel: the width of the backbone's map.
        in_channels: the widths of the four levels (``backbone_channel``
            divided by 4, 2, 1, 1).
        out_channels: the width of every output.
        num_outs: outputs (4 levels and extra ones).
        conv_cfg, norm_cfg, act_cfg: of every ConvModule; ``norm_cfg`` also
            the norm of the stride ``s/4`` branch (ViTDet's: ``LN2d``).
    """

    def __init__(
        self,
        backbone_channel: int,
        in_channels: Sequence[int],
        out_channels: int,
        num_outs: int,
        conv_cfg: Optional[dict] = None,
        norm_cfg: Optional[dict] = None,
        act_cfg: Optional[dict] = None,
        init_cfg=None,
    ):
        super().__init__(init_cfg=init_cfg)
        dim = backbone_channel
        self.num_outs = num_outs
        self.fpn1 = nn.Sequential(
            nn.ConvTranspose2d(dim, dim // 2, 2, 2),
            build_norm_layer(norm_cfg, dim // 2)[1],
            nn.GELU(),
            nn.ConvTranspose2d(dim // 2, dim // 4, 2, 2),
        )
        self.fpn2 = nn.Sequential(nn.ConvTranspose2d(dim, dim // 2, 2, 2))
        self.fpn3 = nn.Sequential(nn.Identity())
        self.fpn4 = nn.Sequential(nn.MaxPool2d(kernel_size=2, stride=2))
        conv = dict(
            conv_cfg=conv_cfg,
            norm_cfg=norm_cfg,
            act_cfg=act_cfg,
            inplace=False,
        )
        self.lateral_convs = nn.ModuleList(
            ConvModule(width, out_channels, 1, **conv) for width in in_channels
        )
        self.fpn_convs = nn.ModuleList(
            ConvModule(out_channels, out_channels, 3, padding=1, **conv)
            for _ in in_channels
        )

    def forward(self, inputs: Union[torch.Tensor, Sequence[torch.Tensor]]):
        x = inputs if isinstance(inputs, torch.Tensor) else inputs[-1]
        levels = [
            branch(x)
            for branch in (self.fpn1, self.fpn2, self.fpn3, self.fpn4)
        ]
        outs = [
            output(lateral(level))
            for level, lateral, output in zip(
                levels, self.lateral_convs, self.fpn_convs
            )
        ]
        while len(outs) < self.num_outs:
            outs.append(F.max_pool2d(outs[-1], 1, stride=2))
        return tuple(outs)
