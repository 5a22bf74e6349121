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

from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.layers import DropPath, Mlp

from ..gates import GatedResidualBranch
from ..layers import (
    assemble_block,
    choose_block_layers,
    residual_gelu_applies,
)

#: What the attention logits of token pairs from different regions of a
#: shifted window get (as the reference implementations: exp(-100) ~ 0).
MASKED_LOGIT = -100.0

HWShape = Tuple[int, int]


def relative_position_index(window: int, table_window: int) -> torch.Tensor:
    """``(window², window²)`` indices into a relative-position-bias table
    made for ``table_window`` (``(2 * table_window - 1)²`` rows), for the
    token pairs of a ``window`` x ``window`` window (``window <=
    table_window``: a smaller window uses the table's central offsets)."""
    coords = torch.stack(
        torch.meshgrid(
            torch.arange(window), torch.arange(window), indexing='ij'
        )
    ).flatten(1)
    offsets = coords[:, :, None] - coords[:, None, :] + table_window - 1
    return offsets[0] * (2 * table_window - 1) + offsets[1]


def window_partition(x: torch.Tensor, window: int) -> torch.Tensor:
    """``(B, H, W, C)`` -> ``(B * windows, window², C)``."""
    batch, height, width, channels = x.shape
    x = x.view(
        batch, height // window, window, width // window, window, channels
    )
    return x.permute(0, 1, 3, 2, 4, 5).reshape(-1, window * window, channels)


def window_reverse(
    windows: torch.Tensor, window: int, height: int, width: int
) -> torch.Tensor:
    """The inverse of :func:`window_partition`."""
    channels = windows.shape[-1]
    x = windows.view(
        -1, height // window, width // window, window, window, channels
    )
    return x.permute(0, 1, 3, 2, 4, 5).reshape(-1, height, width, channels)


def shifted_window_mask(
    height: int, width: int, window: int, shift: int, device
) -> torch.Tensor:
    """``(windows, window², window²)`` additive mask of a map rolled by
    ``shift``: tokens that were not neighbours before the roll do not
    attend to each other."""
    region = torch.zeros(1, height, width, 1, device=device)
    bounds = (slice(0, -window), slice(-window, -shift), slice(-shift, None))
    label = 0
    for rows in bounds:
        for cols in bounds:
            region[:, rows, cols, :] = label
            label += 1
    labels = window_partition(region, window).squeeze(-1)
    different = labels[:, None, :] != labels[:, :, None]
    return torch.zeros(different.shape, device=device).masked_fill(
        different, MASKED_LOGIT
    )


class WindowAttention(nn.Module):
    """Multi-head self-attention within (shifted) windows, with a learned
    relative position bias (Swin's W-MSA / SW-MSA).

    Args:
        window_size: side of the square windows (and of the bias table).
        shift_size: roll of the map before partitioning (0: W-MSA).
        pad_small_map: a map no larger than a window is padded to whole
            (shifted) windows, as mmdet's / mmseg's Swin; otherwise
            (classification: the official code, timm, mmpretrain) the
            window shrinks to the map and is not shifted.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        window_size: int,
        shift_size: int = 0,
        qkv_bias: bool = True,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        pad_small_map: bool = False,
        qk_scale: Optional[float] = None,
    ):
        super().__init__()
        if not 0 <= shift_size < window_size:
            raise ValueError(
                f'shift_size must be in 0..{window_size - 1}, got {shift_size}'
            )
        if dim % num_heads:
            raise ValueError(
                f'{dim} channels do not split into {num_heads} heads'
            )
        self.num_heads = num_heads
        self.window_size = window_size
        self.shift_size = shift_size
        self.pad_small_map = pad_small_map
        self.scale = qk_scale or (dim // num_heads) ** -0.5
        self.relative_position_bias_table = nn.Parameter(
            torch.zeros((2 * window_size - 1) ** 2, num_heads)
        )
        self.register_buffer(
            'relative_position_index',
            relative_position_index(window_size, window_size),
            persistent=False,
        )
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def window_and_shift(self, hw_shape: HWShape) -> Tuple[int, int]:
        """The window side and shift used on a map of ``hw_shape``."""
        smallest = min(hw_shape)
        if smallest <= self.window_size and not self.pad_small_map:
            return smallest, 0
        return self.window_size, self.shift_size

    def relative_position_bias(self, window: int) -> torch.Tensor:
        index = (
            self.relative_position_index
            if window == self.window_size
            else relative_position_index(window, self.window_size).to(
                self.relative_position_index.device
            )
        )
        bias = self.relative_position_bias_table[index.flatten()]
        return bias.view(window * window, window * window, -1).permute(2, 0, 1)

    def attend(
        self,
        windows: torch.Tensor,
        bias: torch.Tensor,
        mask: Optional[torch.Tensor],
    ) -> torch.Tensor:
        """Self-attention within each window: ``(B * windows, N, C)``.

        One ``scaled_dot_product_attention`` call: PyTorch's fused kernel
        takes the bias (and shift mask) as an additive mask, 2-2.5x faster
        on CPU than logits, softmax and product written out.  With a shift
        mask, each image's windows are treated as extra heads, so that one
        ``(1, windows * heads, N, N)`` mask broadcasts over the images
        without a copy (a 5-D mask would take the unfused path).
        """
        count, tokens, channels = windows.shape
        groups = 1 if mask is None else mask.shape[0]
        heads = groups * self.num_heads
        qkv = self.qkv(windows).reshape(
            count // groups, groups, tokens, 3, self.num_heads, -1
        )
        query, key, value = (
            qkv.permute(3, 0, 1, 4, 2, 5)
            .reshape(3, count // groups, heads, tokens, -1)
            .unbind(0)
        )
        if mask is not None:
            bias = (mask[:, None] + bias).flatten(0, 1)
        out = F.scaled_dot_product_attention(
            query,
            key,
            value,
            attn_mask=bias[None],
            dropout_p=self.attn_drop.p if self.training else 0.0,
            scale=self.scale,
        )
        out = out.view(count // groups, groups, self.num_heads, tokens, -1)
        out = out.permute(0, 1, 3, 2, 4).reshape(count, tokens, channels)
        return self.proj_drop(self.proj(out))

    def forward(self, x: torch.Tensor, hw_shape: HWShape) -> torch.Tensor:
        batch, _, channels = x.shape
        height, width = hw_shape
        window, shift = self.window_and_shift(hw_shape)
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
            window_partition(x, window),
            self.relative_position_bias(window),
            mask,
        )
        x = window_reverse(windows, window, padded_height, padded_width)
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


class SwinBlock(nn.Module):
    """A pre-norm Swin block; ``residual_gelu`` ends it with a GELU on the
    residual stream (blocks with both layers removed in released HetDPT
    models)."""

    def __init__(
        self,
        dim: int,
        num_heads: int,
        window_size: int,
        shift_size: int,
        mlp_ratio: float,
        qkv_bias: bool,
        drop_path: float,
        drop_rate: float,
        attn_drop_rate: float,
        pad_small_map: bool,
        attn_layer,
        act_layer,
        mlp_layer=Mlp,
        residual_gelu: bool = False,
        qk_scale: Optional[float] = None,
    ):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = attn_layer(
            dim,
            num_heads,
            window_size=window_size,
            shift_size=shift_size,
            qkv_bias=qkv_bias,
            attn_drop=attn_drop_rate,
            proj_drop=drop_rate,
            pad_small_map=pad_small_map,
            qk_scale=qk_scale,
        )
        self.drop_path1 = (
            DropPath(drop_path) if drop_path > 0 else nn.Identity()
        )
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = mlp_layer(
            in_features=dim,
            hidden_features=int(dim * mlp_ratio),
            act_layer=act_layer,
            drop=drop_rate,
        )
        self.drop_path2 = (
            DropPath(drop_path) if drop_path > 0 else nn.Identity()
        )
        self.residual_act = nn.GELU() if residual_gelu else nn.Identity()

    def forward_branches(
        self, x: torch.Tensor, hw_shape: HWShape
    ) -> torch.Tensor:
        x = x + self.drop_path1(self.attn(self.norm1(x), hw_shape))
        return x + self.drop_path2(self.mlp(self.norm2(x)))

    def forward(self, x: torch.Tensor, hw_shape: HWShape) -> torch.Tensor:
        return self.residual_act(self.forward_branches(x, hw_shape))


class GatedSwinBlock(SwinBlock):
    """Search-form block: its gates decide at run time whether the residual
    GELU applies, following ``residual_gelu`` (one of RESIDUAL_GELU_MODES)."""

    def __init__(self, *args, residual_gelu: str = 'both_removed', **kwargs):
        super().__init__(*args, residual_gelu=True, **kwargs)
        self.residual_gelu = residual_gelu

    def forward(self, x: torch.Tensor, hw_shape: HWShape) -> torch.Tensor:
        x = self.forward_branches(x, hw_shape)
        if residual_gelu_applies(
            self.residual_gelu, not self.attn.is_open, not self.mlp.act.is_open
        ):
            return self.residual_act(x)
        return x


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


class SwinPatchEmbed(nn.Module):
    """Non-overlapping patches (a strided convolution) and a LayerNorm;
    inputs are padded (bottom / right) to whole patches."""

    def __init__(
        self,
        in_channels: int,
        dim: int,
        patch_size: int,
        patch_norm: bool = True,
    ):
        super().__init__()
        self.patch_size = patch_size
        self.proj = nn.Conv2d(in_channels, dim, patch_size, patch_size)
        self.norm = nn.LayerNorm(dim) if patch_norm else nn.Identity()

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, HWShape]:
        height, width = x.shape[-2:]
        x = F.pad(
            x, (0, -width % self.patch_size, 0, -height % self.patch_size)
        )
        x = self.proj(x)
        hw_shape = tuple(x.shape[-2:])
        return self.norm(x.flatten(2).transpose(1, 2)), hw_shape


class PatchMerging(nn.Module):
    """Halve the map and double the channels: each 2 x 2 neighbourhood's
    tokens concatenated (rows, then columns: ``(0,0), (1,0), (0,1),
    (1,1)``, the official order), normalised (unless ``norm`` is false,
    mmdet's ``patch_norm=False``) and projected; odd maps are padded
    (bottom / right)."""

    def __init__(self, dim: int, norm: bool = True):
        super().__init__()
        self.norm = nn.LayerNorm(4 * dim) if norm else nn.Identity()
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)

    def forward(
        self, x: torch.Tensor, hw_shape: HWShape
    ) -> Tuple[torch.Tensor, HWShape]:
        batch, _, channels = x.shape
        height, width = hw_shape
        x = x.view(batch, height, width, channels)
        x = F.pad(x, (0, 0, 0, width % 2, 0, height % 2))
        x = torch.cat(
            [
                x[:, 0::2, 0::2],
                x[:, 1::2, 0::2],
                x[:, 0::2, 1::2],
                x[:, 1::2, 1::2],
            ],
            dim=-1,
        )
        hw_shape = tuple(x.shape[1:3])
        x = x.view(batch, -1, 4 * channels)
        return self.reduction(self.norm(x)), hw_shape


class SwinStage(nn.Module):
    """The blocks of one resolution, then (except in the last stage) the
    patch merging to the next: ``stages.{s}.blocks.{j}``,
    ``stages.{s}.downsample``."""

    def __init__(self, downsample: Optional[PatchMerging]):
        super().__init__()
        self.blocks = nn.ModuleList()
        self.downsample = downsample
