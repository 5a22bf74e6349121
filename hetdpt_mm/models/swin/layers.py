"""Building blocks of HetDPTSwin: Swin Transformer parts and their HetDPT
variants.

A Swin block is pre-norm like a ViT block, with (shifted) window attention
in place of global attention::

    x = x + WindowAttention(LN1(x))     # W-MSA (even blocks), SW-MSA (odd)
    x = x + fc2(GELU(fc1(LN2(x))))

Which attention, activation and FFN a block is built with follows the one
decision of :func:`~hetdpt_mm.models.layers.choose_block_layers`, exactly as
for ViT blocks: a removed W-MSA / SW-MSA leaves ``AttentionBypass``
(``x + LN1(x)``) or ``AttentionZero``, a removed GELU leaves an identity
(``MergedFFN`` once merged), and the residual-stream GELU follows the
``residual_gelu`` mode.

Maps are ``(B, H*W, C)`` token sequences with their ``(H, W)`` passed along.
Every size works: maps are padded (bottom / right) to whole windows and to
even sizes before patch merging, and the padding is dropped again.
"""

from itertools import product
from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.models import swin_transformer as timm_swin
from timm.models.swin_transformer import get_relative_position_index

from ..gates import GatedResidualBranch
from ..layers import (
    AttentionBypass,
    GatedHetDPTBlock,
    HetDPTBlock,
    assemble_block,
    choose_block_layers,
)

#: What the attention logits of token pairs from different regions of a
#: shifted window get (as the reference implementations: exp(-100) ~ 0).
MASKED_LOGIT = -100.0

HWShape = Tuple[int, int]


def shifted_window_mask(
    height: int, width: int, window: int, shift: int, device
) -> torch.Tensor:
    """``(windows, window², window²)`` additive mask of a map rolled by
    ``shift``: tokens that were not neighbours before the roll do not
    attend to each other."""
    region = torch.zeros(1, height, width, 1, device=device)
    bounds = (slice(0, -window), slice(-window, -shift), slice(-shift, None))
    for label, (rows, cols) in enumerate(product(bounds, bounds)):
        region[:, rows, cols] = label
    labels = timm_swin.window_partition(region, (window, window)).flatten(1)
    different = labels[:, None, :] != labels[:, :, None]
    return torch.zeros(different.shape, device=device).masked_fill(
        different, MASKED_LOGIT
    )


class WindowAttention(timm_swin.WindowAttention):
    """timm's window attention (Swin's W-MSA / SW-MSA, with its relative
    position bias table) applied to a whole map, as mmdet's / mmseg's Swin:
    the map is padded to whole windows, *then* rolled by ``shift_size``
    (timm's block rolls before padding).

    Args:
        shift_size: roll of the map before partitioning (0: W-MSA).
        pad_small_map: a map no larger than a window is padded to whole
            (shifted) windows, as mmdet's / mmseg's Swin; otherwise
            (classification: the official code, timm, mmpretrain) the
            window shrinks to the map and is not shifted.
        qk_scale: the logit scale (``None``: head width ``**-0.5``).
        **timm_args: timm's ``window_size`` (side of the square windows and
            of the bias table), ``qkv_bias``, ``attn_drop``, ``proj_drop``.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        shift_size: int = 0,
        pad_small_map: bool = False,
        qk_scale: Optional[float] = None,
        **timm_args,
    ):
        super().__init__(dim, num_heads, **timm_args)
        self.shift_size = shift_size
        self.pad_small_map = pad_small_map
        self.scale = qk_scale or self.scale

    def reset_parameters(self) -> None:
        # A zero table, as mmdet's Swin until init_weights: building a
        # model draws no random numbers for it.
        nn.init.zeros_(self.relative_position_bias_table)
        self._init_buffers()

    def relative_position_bias(self, window: int) -> torch.Tensor:
        """``(1, heads, window², window²)``; a window shrunk to a small map
        reads the table's central offsets."""
        full = self.window_size[0]
        if window == full:
            return self._get_rel_pos_bias()
        centre = slice(full - window, full + window - 1)
        table = self.relative_position_bias_table.view(
            2 * full - 1, 2 * full - 1, -1
        )[centre, centre].reshape(-1, self.num_heads)
        index = get_relative_position_index(window, window).flatten()
        bias = table[index.to(table.device)].view(window**2, window**2, -1)
        return bias.permute(2, 0, 1)[None]

    def attend(
        self,
        windows: torch.Tensor,
        bias: torch.Tensor,
        mask: Optional[torch.Tensor],
    ) -> torch.Tensor:
        """Self-attention within each window, ``(B * windows, N, C)``, in
        one fused ``scaled_dot_product_attention`` call, as a ViT's timm
        Attention (timm's ``fused_attn`` flag, off for window attention, is
        not read).  With a shift mask, each image's windows are extra heads,
        so that one ``(1, windows * heads, N, N)`` mask broadcasts over the
        images without a copy (a 5-D mask would take the unfused path)."""
        count, tokens, channels = windows.shape
        groups = 1 if mask is None else mask.shape[0]
        qkv = self.qkv(windows).view(
            count // groups, groups, tokens, 3, self.num_heads, -1
        )
        query, key, value = qkv.permute(3, 0, 1, 4, 2, 5).flatten(2, 3)
        if mask is not None:
            bias = (mask[:, None] + bias).flatten(0, 1)[None]
        out = F.scaled_dot_product_attention(
            query,
            key,
            value,
            attn_mask=bias,
            dropout_p=self.attn_drop.p if self.training else 0.0,
            scale=self.scale,
        )
        out = out.unflatten(1, (groups, self.num_heads)).transpose(2, 3)
        return self.proj_drop(self.proj(out.reshape(count, tokens, channels)))

    def forward(self, x: torch.Tensor, hw_shape: HWShape) -> torch.Tensor:
        batch, _, channels = x.shape
        height, width = hw_shape
        window, shift = self.window_size[0], self.shift_size
        if min(hw_shape) <= window and not self.pad_small_map:
            window, shift = min(hw_shape), 0
        x = x.view(batch, height, width, channels)
        padded = bool(height % window or width % window)
        if padded:  # (a copy: skipped where the windows fit, e.g. at 224²)
            x = F.pad(x, (0, 0, 0, -width % window, 0, -height % window))
        padded_height, padded_width = x.shape[1:3]
        mask = None
        if shift:
            x = torch.roll(x, (-shift, -shift), dims=(1, 2))
            mask = shifted_window_mask(
                padded_height, padded_width, window, shift, x.device
            )
        windows = self.attend(
            timm_swin.window_partition(x, (window, window)).flatten(1, 2),
            self.relative_position_bias(window),
            mask,
        )
        x = timm_swin.window_reverse(
            windows, (window, window), padded_height, padded_width
        )
        if shift:
            x = torch.roll(x, (shift, shift), dims=(1, 2))
        if padded:
            x = x[:, :height, :width].contiguous()
        return x.reshape(batch, height * width, channels)


class GatedWindowAttention(GatedResidualBranch, WindowAttention):
    """Window attention behind a straight-through gate (search form)."""

    def __init__(self, *args, **kwargs):
        WindowAttention.__init__(self, *args, **kwargs)
        self.init_gate()


class WindowBlock:
    """A timm ``Block`` (norms, FFN, drop paths) whose attention is
    ``attn_layer(dim, num_heads, **attn_args)`` (:class:`WindowAttention`'s
    arguments), called with the map's ``(H, W)``."""

    def __init__(
        self, dim: int, num_heads: int, attn_layer, attn_args, **block_args
    ):
        # timm's Block cannot pass window arguments: a placeholder without
        # tensors stands in for the attention, built first (the order in
        # which a seeded model draws its weights).
        attn = attn_layer(dim, num_heads, **attn_args)
        super().__init__(
            dim,
            num_heads,
            attn_layer=AttentionBypass,
            norm_layer=nn.LayerNorm,
            **block_args,
        )
        self.attn = attn

    def forward(self, x: torch.Tensor, hw_shape: HWShape) -> torch.Tensor:
        x = x + self.drop_path1(self.attn(self.norm1(x), hw_shape))
        x = x + self.drop_path2(self.mlp(self.norm2(x)))
        return self.residual_activation(x)


class SwinBlock(WindowBlock, HetDPTBlock):
    """A pre-norm Swin block; ``residual_gelu`` ends it with a GELU on the
    residual stream (blocks with both layers removed in released HetDPT
    models)."""


class GatedSwinBlock(WindowBlock, GatedHetDPTBlock):
    """Search-form Swin block: its gates decide at run time whether the
    residual GELU applies, following ``residual_gelu``."""


def build_swin_block(
    form: str,
    attn_removed: bool,
    act_removed: bool,
    removed_attn_output: str,
    residual_gelu: str,
    **block_args,
) -> SwinBlock:
    """Build one Swin block of the given form (layer types from
    :func:`~hetdpt_mm.models.layers.choose_block_layers`; ``block_args``:
    :class:`SwinBlock`'s)."""
    layers = choose_block_layers(
        form,
        attn_removed,
        act_removed,
        removed_attn_output,
        residual_gelu,
        WindowAttention,
        GatedWindowAttention,
    )
    return assemble_block(
        layers,
        form,
        attn_removed,
        act_removed,
        removed_attn_output,
        block_type=SwinBlock,
        gated_block_type=GatedSwinBlock,
        **block_args,
    )


class PatchMerging(timm_swin.PatchMerging):
    """timm's patch merging (each 2 x 2 neighbourhood's tokens in the
    official order ``(0,0), (1,0), (0,1), (1,1)``, normalised unless
    ``norm`` is false, as mmdet's ``patch_norm=False``, and projected; odd
    maps padded bottom / right) on a token sequence."""

    def __init__(self, dim: int, norm: bool = True):
        super().__init__(dim, norm_layer=nn.LayerNorm if norm else nn.Identity)

    def forward(
        self, x: torch.Tensor, hw_shape: HWShape
    ) -> Tuple[torch.Tensor, HWShape]:
        x = super().forward(x.view(x.shape[0], *hw_shape, -1))
        return x.flatten(1, 2), tuple(x.shape[1:3])


class SwinStage(nn.Module):
    """The blocks of one resolution, then (except in the last stage) the
    patch merging to the next: ``stages.{s}.blocks.{j}``,
    ``stages.{s}.downsample``."""

    def __init__(self, downsample: Optional[PatchMerging]):
        super().__init__()
        self.blocks = nn.ModuleList()
        self.downsample = downsample
