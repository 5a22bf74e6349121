"""Building blocks of HetDPTViT (timm's ViT parts plus the HetDPT variants),
and the layer choice every family's blocks follow.

A block is always timm's pre-norm
:class:`timm.models.vision_transformer.Block`; what HetDPT changes is which
attention layer, activation and FFN it is built with (docs/method.md section
1):

============  ===================  =======================  ===============
form          attention removed    GELU removed             both removed
============  ===================  =======================  ===============
gated         GatedAttention,      GatedGELU, gate closed   + residual GELU
              gate closed                                   decided by gates
pruned        AttentionBypass      Mlp with Identity act    + ResidualGELU
merged        AttentionBypass      MergedFFN (one D x D)    + ResidualGELU
============  ===================  =======================  ===============

With ``removed_attn_output='identity'`` (whole-branch removal,
docs/user_guides/dinov2.md) a removed attention branch and a removed FFN branch
(``PruneSpec.ffn_removed``) lose their LayerNorm, sublayer and LayerScale
and leave ``x``: the pruned and merged forms hold none of their tensors
(:func:`remove_branches`), the gated form gates every FFN branch as well
(:class:`~.gates.GatedMlp`, :class:`~.gates.GatedSwiGLU`).

The pruned and merged forms have no gates and no per-block Python branches.
After width pruning (HetDPT+) a block of either form may have its own number
of heads, head dimension and FFN hidden width (``widths``); a merged FFN
stays one ``D x D`` linear.
"""

from dataclasses import dataclass
from typing import Optional, Tuple, Type, Union

import torch
import torch.nn as nn
from timm.layers import Attention, Mlp, SwiGLUPacked
from timm.models.vision_transformer import Block

from ..spec import (
    WHOLE_BRANCH,
)
from .gates import (
    GatedAttention,
    GatedGELU,
    GatedMlp,
    GatedResidualBranch,
    GatedSwiGLU,
)


class AttentionBypass(nn.Module):
    """A removed attention sublayer of a released HetDPT model: the residual
    branch carries the normalised input, ``x + LN1(x)``.  It takes (and
    ignores) whatever the family's attention is built and called with."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, x, *args, **kwargs):
        return x


class AttentionZero(AttentionBypass):
    """A removed attention sublayer that contributes nothing."""

    def forward(self, x, *args, **kwargs):
        return torch.zeros_like(x)


class RemovedBranch(nn.Module):
    """A removed residual branch (whole-branch removal): it holds no
    tensors and adds nothing, so the block leaves ``x``."""

    def forward(self, x, *args, **kwargs):
        return torch.zeros_like(x)


def remove_branches(block: nn.Module, attn: bool, ffn: bool) -> None:
    """Take the attention branch (``attn``) and / or the FFN branch
    (``ffn``) out of a pruned or merged block: LayerNorm, sublayer and
    LayerScale go, the branch adds nothing."""
    for removed, names in (
        (attn, ('norm1', 'attn', 'ls1')),
        (ffn, ('norm2', 'mlp', 'ls2')),
    ):
        if removed:
            norm, sublayer, scale = names
            setattr(block, norm, nn.Identity())
            setattr(block, sublayer, RemovedBranch())
            if hasattr(block, scale):
                setattr(block, scale, nn.Identity())


class MergedFFN(nn.Module):
    """An activation-free FFN ``fc2(fc1(x))`` merged into one ``D x D``
    linear: ``W = W2 W1``, ``b = W2 b1 + b2``."""

    def __init__(
        self,
        in_features: int,
        hidden_features: Optional[int] = None,
        bias: bool = True,
        **unused_mlp_kwargs,
    ):
        super().__init__()
        self.fc = nn.Linear(in_features, in_features, bias=bias)

    def forward(self, x):
        return self.fc(x)


class HetDPTBlock(Block):
    """timm's Block followed by an optional activation on the residual
    stream (blocks with both layers removed in released HetDPT models)."""

    def __init__(self, *args, residual_gelu: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.residual_act = nn.GELU() if residual_gelu else nn.Identity()

    def forward(self, x, attn_mask=None, is_causal=False):
        x = super().forward(x, attn_mask=attn_mask, is_causal=is_causal)
        return self.residual_activation(x)

    def residual_activation(self, x):
        return self.residual_act(x)


class GatedHetDPTBlock(Block):
    """Search-form block: its gates decide at run time whether the residual
    GELU applies, following ``residual_gelu`` (one of RESIDUAL_GELU_MODES)."""

    def __init__(self, *args, residual_gelu: str = 'both_removed', **kwargs):
        super().__init__(*args, **kwargs)
        self.residual_gelu = residual_gelu
        self.residual_act = nn.GELU()

    def residual_gelu_active(self) -> bool:
        return residual_gelu_applies(
            self.residual_gelu, not self.attn.is_open, not self.mlp.act.is_open
        )

    def forward(self, x, attn_mask=None, is_causal=False):
        x = super().forward(x, attn_mask=attn_mask, is_causal=is_causal)
        return self.residual_activation(x)

    def residual_activation(self, x):
        return self.residual_act(x) if self.residual_gelu_active() else x


def residual_gelu_applies(
    mode: str, attn_removed: bool, act_removed: bool
) -> bool:
    """Whether a block ends with a GELU on the residual stream, for a
    ``residual_gelu`` mode (one of RESIDUAL_GELU_MODES)."""
    return {
        'both_removed': attn_removed and act_removed,
        'act_removed': act_removed,
        'never': False,
    }[mode]


@dataclass(frozen=True)
class BlockLayers:
    """The layer types one block is built with.

    ``mlp_layer`` is ``None`` where the family's own FFN applies;
    ``residual_gelu`` is the mode for a gated block (its gates decide at run
    time) and a fixed yes/no otherwise.
    """

    attn_layer: Type[nn.Module]
    act_layer: Type[nn.Module]
    mlp_layer: Optional[Type[nn.Module]]
    residual_gelu: Union[str, bool]


def choose_block_layers(
    form: str,
    attn_removed: bool,
    act_removed: bool,
    removed_attn_output: str,
    residual_gelu: str,
    attention: Type[nn.Module],
    gated_attention: Type[nn.Module],
) -> BlockLayers:
    """Which layer types make up a block of ``form`` with these layers
    removed: the one decision every family's block builder follows
    (``attention`` / ``gated_attention``: the family's own attention and its
    gated variant)."""
    if form == 'gated':
        return BlockLayers(
            gated_attention,
            GatedGELU,
            GatedMlp if removed_attn_output == WHOLE_BRANCH else None,
            residual_gelu,
        )
    if attn_removed:
        attn_layer = (
            AttentionBypass if removed_attn_output == 'norm' else AttentionZero
        )
    else:
        attn_layer = attention
    return BlockLayers(
        attn_layer=attn_layer,
        act_layer=nn.Identity if act_removed else nn.GELU,
        mlp_layer=MergedFFN if act_removed and form == 'merged' else None,
        residual_gelu=residual_gelu_applies(
            residual_gelu, attn_removed, act_removed
        ),
    )


def set_block_gates(
    attn: GatedResidualBranch,
    act: Optional[GatedGELU],
    attn_removed: bool,
    act_removed: bool,
    removed_attn_output: str,
    ffn: Optional[GatedResidualBranch] = None,
    ffn_removed: bool = False,
) -> None:
    """Open or close a gated block's gates (``act``: none for a SwiGLU FFN;
    ``ffn``: its FFN branch's, with whole-branch removal); a closed
    attention gate leaves what ``removed_attn_output`` says."""
    attn.passthrough = removed_attn_output == 'norm'
    attn.set_open(not attn_removed)
    if act is not None:
        act.set_open(not act_removed)
    if ffn is not None:
        ffn.set_open(not ffn_removed)


def check_branch_removal(
    attn_removed: bool, ffn_removed: bool, removed_attn_output: str
) -> None:
    """An FFN branch is removed only under whole-branch removal, and never
    with the attention branch of its block: a block without tensors would
    leave the network's depth unreadable from its weights."""
    if not ffn_removed:
        return
    if removed_attn_output != WHOLE_BRANCH:
        raise ValueError(
            f"ffn_removed needs removed_attn_output='{WHOLE_BRANCH}'"
        )
    if attn_removed:
        raise ValueError('both branches of a block removed: keep one')


def assemble_block(
    layers: BlockLayers,
    form: str,
    attn_removed: bool,
    act_removed: bool,
    removed_attn_output: str,
    ffn_removed: bool = False,
    *,
    block_type: Type[nn.Module] = HetDPTBlock,
    gated_block_type: Type[nn.Module] = GatedHetDPTBlock,
    **block_args,
) -> nn.Module:
    """The block of the chosen layer types: ``block_type`` (``block_args``:
    its arguments; a timm ``Block``'s by default), ``gated_block_type`` in
    the gated form, which gets its gates set; a pruned or merged block loses
    its removed whole branches."""
    check_branch_removal(attn_removed, ffn_removed, removed_attn_output)
    if layers.mlp_layer is not None:
        block_args['mlp_layer'] = layers.mlp_layer
    if form == 'gated':
        block = gated_block_type(
            attn_layer=layers.attn_layer,
            act_layer=layers.act_layer,
            residual_gelu=layers.residual_gelu,
            **block_args,
        )
        set_block_gates(
            block.attn,
            block.mlp.act,
            attn_removed,
            act_removed,
            removed_attn_output,
            gated_ffn(block),
            ffn_removed,
        )
        return block
    block = block_type(
        attn_layer=layers.attn_layer,
        act_layer=layers.act_layer,
        residual_gelu=layers.residual_gelu,
        **block_args,
    )
    whole = removed_attn_output == WHOLE_BRANCH
    remove_branches(block, attn_removed and whole, ffn_removed)
    return block


def gated_ffn(block: nn.Module) -> Optional[GatedResidualBranch]:
    """The gated FFN branch of a gated block, if it has one."""
    return block.mlp if isinstance(block.mlp, GatedResidualBranch) else None


def build_block(
    dim: int,
    num_heads: int,
    mlp_ratio: float,
    qkv_bias: bool,
    drop_path: float,
    form: str,
    attn_removed: bool,
    act_removed: bool,
    removed_attn_output: str,
    residual_gelu: str,
    norm_layer,
    drop_rate: float = 0.0,
    attn_drop_rate: float = 0.0,
    widths: Optional[Tuple[int, int, Optional[int]]] = None,
    ffn_removed: bool = False,
    ffn: str = 'mlp',
    **block_args,
) -> Block:
    """Build one ViT block of the given form (layer types from
    :func:`choose_block_layers`). ``widths`` are the block's
    ``(num_heads, head_dim, ffn_hidden)`` after width pruning (``None``:
    ``num_heads`` heads of ``dim / num_heads`` and ``mlp_ratio * dim``);
    ``ffn``: ``'mlp'`` or ``'swiglu'`` (:func:`build_swiglu_block`);
    ``block_args``: further timm ``Block`` arguments (LayerScale's
    ``init_values``)."""
    if widths is not None and form == 'gated':
        raise ValueError('a width-pruned network has no gated form')
    common = dict(
        dim=dim,
        num_heads=num_heads,
        mlp_ratio=mlp_ratio,
        qkv_bias=qkv_bias,
        drop_path=drop_path,
        proj_drop=drop_rate,
        attn_drop=attn_drop_rate,
        norm_layer=norm_layer,
        **block_args,
    )
    if widths is not None:
        # timm sizes attention by dim / num_heads; _set_widths replaces it.
        common['num_heads'] = 1
    layers = choose_block_layers(
        form,
        attn_removed,
        act_removed,
        removed_attn_output,
        residual_gelu,
        Attention,
        GatedAttention,
    )
    if ffn == 'swiglu':
        return build_swiglu_block(
            layers,
            form,
            attn_removed,
            removed_attn_output,
            ffn_removed,
            **common,
        )
    block = assemble_block(
        layers,
        form,
        attn_removed,
        act_removed,
        removed_attn_output,
        ffn_removed,
        **common,
    )
    if layers.mlp_layer is MergedFFN:
        block.ls2 = nn.Identity()  # a LayerScale is folded into the linear
    if widths is not None:
        _set_widths(
            block,
            *widths,
            qkv_bias=qkv_bias,
            drop_rate=drop_rate,
            attn_drop_rate=attn_drop_rate,
            act_layer=layers.act_layer,
        )
    return block


def build_swiglu_block(
    layers: BlockLayers,
    form: str,
    attn_removed: bool,
    removed_attn_output: str,
    ffn_removed: bool,
    **block_args,
) -> Block:
    """A block with a SwiGLU FFN (DINOv2-g), ``fc2(SiLU(x1) * x2)``: its
    attention from ``layers``; its SiLU is never removed (the FFN would not
    be linear), so it has no residual GELU either."""
    check_branch_removal(attn_removed, ffn_removed, removed_attn_output)
    whole = removed_attn_output == WHOLE_BRANCH
    gated = form == 'gated'
    block = HetDPTBlock(
        attn_layer=layers.attn_layer,
        act_layer=nn.SiLU,
        mlp_layer=GatedSwiGLU if gated and whole else SwiGLUPacked,
        residual_gelu=False,
        **block_args,
    )
    if gated:
        set_block_gates(
            block.attn,
            None,
            attn_removed,
            False,
            removed_attn_output,
            block.mlp if whole else None,
            ffn_removed,
        )
    else:
        remove_branches(block, attn_removed and whole, ffn_removed)
    return block


def _set_widths(
    block: Block,
    num_heads: int,
    head_dim: int,
    ffn_hidden: Optional[int],
    qkv_bias: bool,
    drop_rate: float,
    attn_drop_rate: float,
    act_layer,
) -> None:
    """Give a block its own attention and FFN widths (timm builds them from
    ``dim``, ``num_heads`` and ``mlp_ratio`` alone)."""
    dim = block.norm1.normalized_shape[0]
    if isinstance(block.attn, Attention):
        block.attn = Attention(
            dim,
            num_heads=num_heads,
            attn_head_dim=head_dim,
            qkv_bias=qkv_bias,
            attn_drop=attn_drop_rate,
            proj_drop=drop_rate,
        )
    if isinstance(block.mlp, Mlp):
        if ffn_hidden is None:
            raise ValueError('a width-pruned merged FFN needs merged=True')
        block.mlp = Mlp(
            dim,
            hidden_features=ffn_hidden,
            act_layer=act_layer,
            drop=drop_rate,
        )
