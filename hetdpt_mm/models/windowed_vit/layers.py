"""Building blocks of HetDPTWindowedViT: SAM's / ViTDet's attention (timm's
``vision_transformer_sam``) in windows or over the whole map, and its
HetDPT variants.

A block is pre-norm like a ViT block, on an NHWC map::

    x = x + Attn(LN1(x))      # within windows of window_size, or global
    x = x + fc2(GELU(fc1(LN2(x))))

Which attention, activation and FFN a block is built with follows the one
decision of :func:`~hetdpt_mm.models.layers.choose_block_layers`, exactly as
for ViT blocks; the block itself is the ViT's
(:class:`~hetdpt_mm.models.layers.HetDPTBlock`): its norms, FFN, drop paths
and residual GELU act on the last dimension, so they take the map as it is.
"""

from typing import Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.layers import is_exporting
from timm.models import vision_transformer_sam as timm_sam

from ..gates import GatedResidualBranch
from ..layers import (
    AttentionBypass,
    GatedHetDPTBlock,
    HetDPTBlock,
    assemble_block,
    choose_block_layers,
)


def relative_positions(size: int, table: torch.Tensor) -> torch.Tensor:
    """``(size, size, head_dim)``: the table's row for each query-key
    offset of a ``size``-long axis, the ``(2L - 1)``-row table linearly
    resampled to ``2 * size - 1`` rows where they differ (as timm's and
    SAM's ``get_rel_pos`` for equal query and key sizes; always in an
    exported graph, whose sizes are dynamic)."""
    length = 2 * size - 1
    if is_exporting() or table.shape[0] != length:
        table = F.interpolate(table.T[None], size=length, mode='linear')[0].T
    offsets = torch.arange(size, device=table.device)
    return table[offsets[:, None] - offsets[None, :] + size - 1]


def decomposed_bias(
    query: torch.Tensor,
    rel_pos_h: torch.Tensor,
    rel_pos_w: torch.Tensor,
    size: Tuple[int, int],
) -> torch.Tensor:
    """MViTv2's decomposed relative positions as an additive attention
    bias ``(B, heads, N, N)`` for queries ``(B, heads, N, head_dim)`` of an
    ``(H, W)`` map: ``q . R_h[dh] + q . R_w[dw]``."""
    height, width = size
    batch = query.shape[0] * query.shape[1]
    grid = query.reshape(batch, height, width, -1)
    # Batched over the rows (then the columns): q . R[offset] for every key
    # row (column), as matrix products.
    by_row = grid.transpose(0, 1).flatten(1, 2)
    rel_h = torch.matmul(
        by_row, relative_positions(height, rel_pos_h).transpose(1, 2)
    )
    rel_h = rel_h.unflatten(1, (batch, width)).transpose(0, 1)
    by_column = grid.permute(2, 0, 1, 3).flatten(1, 2)
    rel_w = torch.matmul(
        by_column, relative_positions(width, rel_pos_w).transpose(1, 2)
    )
    rel_w = rel_w.unflatten(1, (batch, height)).permute(1, 2, 0, 3)
    bias = rel_h[..., :, None] + rel_w[..., None, :]
    return bias.reshape(*query.shape[:2], height * width, height * width)


class WindowedAttention(timm_sam.Attention):
    """timm's SAM attention (its parameters: ``qkv``, ``proj``, the
    decomposed relative position tables ``rel_pos_h``, ``rel_pos_w``) on an
    NHWC map: within non-overlapping windows of ``window_size`` (the map
    padded with zeros at the bottom and right, as SAM, ViTDet and
    mmpretrain pad it) or, with ``window_size=0``, over the whole map; one
    fused ``scaled_dot_product_attention`` on 4-D queries, which ONNX
    exports.

    Args:
        window_size: side of the windows; 0: global attention.
        input_size: ``(H, W)`` of the map the tables of a global attention
            are made for (a window's: the window); other maps read them
            resampled, as the references do.
        **timm_args: ``num_heads``, ``qkv_bias``, ``attn_drop``,
            ``proj_drop``, ``use_rel_pos``.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        window_size: int = 0,
        input_size: Tuple[int, int] = (14, 14),
        **timm_args,
    ):
        size = (window_size, window_size) if window_size else input_size
        super().__init__(dim, num_heads, input_size=size, **timm_args)
        self.window_size = window_size

    def forward(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        if not self.window_size:
            return self.attend(x)
        height, width = x.shape[1:3]
        windows, padded = timm_sam.window_partition(x, self.window_size)
        return timm_sam.window_unpartition(
            self.attend(windows), self.window_size, (height, width), padded
        )

    def attend(self, x: torch.Tensor) -> torch.Tensor:
        """Self-attention over each ``(B, H, W, C)`` map."""
        batch, height, width, _ = x.shape
        qkv = self.qkv(x).reshape(batch, height * width, 3, self.num_heads, -1)
        query, key, value = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        bias = (
            decomposed_bias(
                query, self.rel_pos_h, self.rel_pos_w, (height, width)
            )
            if self.use_rel_pos
            else None
        )
        out = F.scaled_dot_product_attention(
            query,
            key,
            value,
            attn_mask=bias,
            dropout_p=self.attn_drop.p if self.training else 0.0,
        )
        out = out.transpose(1, 2).reshape(batch, height, width, -1)
        return self.proj_drop(self.proj(out))


class GatedWindowedAttention(GatedResidualBranch, WindowedAttention):
    """Windowed or global attention behind a straight-through gate."""

    def __init__(self, *args, **kwargs):
        WindowedAttention.__init__(self, *args, **kwargs)
        self.init_gate()


class AttentionFirst:
    """A timm ``Block`` whose attention is ``attn_layer(dim, num_heads,
    **attn_args)``: timm's Block cannot pass window arguments, so a
    placeholder without tensors stands in while it builds the rest."""

    def __init__(
        self, dim: int, num_heads: int, attn_layer, attn_args, **block_args
    ):
        attn = attn_layer(dim, num_heads, **attn_args)
        super().__init__(
            dim, num_heads, attn_layer=AttentionBypass, **block_args
        )
        self.attn = attn


class WindowedBlock(AttentionFirst, HetDPTBlock):
    """A pre-norm block on an NHWC map; ``residual_gelu`` ends it with a
    GELU on the residual stream (blocks with both layers removed in released
    HetDPT models)."""


class GatedWindowedBlock(AttentionFirst, GatedHetDPTBlock):
    """Search-form block: its gates decide at run time whether the residual
    GELU applies, following ``residual_gelu``."""


def build_windowed_block(
    form: str,
    attn_removed: bool,
    act_removed: bool,
    removed_attn_output: str,
    residual_gelu: str,
    **block_args,
) -> nn.Module:
    """Build one block of the given form (layer types from
    :func:`~hetdpt_mm.models.layers.choose_block_layers`; ``block_args``:
    :class:`WindowedBlock`'s, ``attn_args`` those of
    :class:`WindowedAttention`)."""
    layers = choose_block_layers(
        form,
        attn_removed,
        act_removed,
        removed_attn_output,
        residual_gelu,
        WindowedAttention,
        GatedWindowedAttention,
    )
    return assemble_block(
        layers,
        form,
        attn_removed,
        act_removed,
        removed_attn_output,
        block_type=WindowedBlock,
        gated_block_type=GatedWindowedBlock,
        **block_args,
    )
