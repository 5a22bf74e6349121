"""State-dict surgery for HetDPTViT, in one place.

Every conversion between weight layouts goes through
:func:`convert_state_dict`: dense timm/DeiT weights to a pruned structure,
the gated search form to the pruned form, and pruned (activation-free,
unmerged) FFNs to merged ones.  The backbone's ``init_weights``, its
``merged()`` method, the merge hook and ``tools/merge_ckpt.py`` all use it.

Keys follow timm's VisionTransformer layout, relative to the backbone
(:func:`from_openmmlab_layout` first renames mmpretrain's and mmseg's ViT
layouts to it)::

    cls_token, dist_token, pos_embed, patch_embed.proj.*, norm.*,
    patch_embed.norm.*, norm_pre.*    (patch_norm, pre_norm)
    blocks.{i}.norm1.*, blocks.{i}.attn.{qkv,proj}.*, blocks.{i}.norm2.*,
    blocks.{i}.mlp.{fc1,fc2}.*        (pruned/gated FFN)
    blocks.{i}.mlp.fc.*               (merged activation-free FFN)
    blocks.{i}.attn.hetdpt_{score,gate}, blocks.{i}.mlp.act.hetdpt_{score,gate}
                                      (gated form only)
"""

import math
import re
from collections import OrderedDict
from typing import Dict, List, Mapping, Optional, Tuple

import torch

from ...errors import CheckpointError
from ...spec import FFN, PruneSpec
from ..gates import GATE_SUFFIXES
from ..layers import WHOLE_BRANCH

_BLOCK_KEY = re.compile(r'^blocks\.(\d+)\.(.+)$')
#: Keys every ViT backbone checkpoint has; used to recognise one.
VIT_MARKERS = ('pos_embed', 'patch_embed.proj.weight')


#: Keys that identify OpenMMLab's ViT layouts (mmpretrain's
#: ``VisionTransformer`` / ``DistilledVisionTransformer``, mmseg's
#: ``VisionTransformer`` and its converted timm weights).
OPENMMLAB_VIT_MARKERS = ('pos_embed', 'patch_embed.projection.weight')
_OPENMMLAB_BLOCK_KEY = re.compile(r'^layers\.(\d+)\.(.+)$')
#: LayerScale, which makes ViT weights a LayerScale ViT's: the official
#: DeiT-III release names it ``blocks.{i}.gamma_{1,2}``; mmpretrain's
#: ``VisionTransformer(layer_scale_init_value > 0)`` (and ``DeiT3``) keeps
#: it in the attention and the FFN.
DEIT3_GAMMA = re.compile(r'^(blocks\.\d+\.)gamma_([12])$')
_OPENMMLAB_GAMMA = re.compile(
    r'^layers\.\d+\.(attn\.gamma1|ffn\.gamma2)\.weight$'
)
#: Renames inside a block, OpenMMLab -> timm (mmseg's attention is
#: ``nn.MultiheadAttention``, whose packed input projection is timm's qkv:
#: rows q, k, v).
_OPENMMLAB_BLOCK_RENAMES = (
    ('ln1.', 'norm1.'),
    ('ln2.', 'norm2.'),
    ('attn.attn.in_proj_weight', 'attn.qkv.weight'),
    ('attn.attn.in_proj_bias', 'attn.qkv.bias'),
    ('attn.attn.out_proj.', 'attn.proj.'),
    ('attn.gamma1.weight', 'ls1.gamma'),  # mmpretrain's LayerScale
    ('ffn.layers.0.0.', 'mlp.fc1.'),
    ('ffn.layers.1.', 'mlp.fc2.'),
    ('ffn.gamma2.weight', 'ls2.gamma'),
    ('ffn.w12.', 'mlp.fc1.'),  # mmpretrain's SwiGLUFFNFused (DINOv2-g)
    ('ffn.w3.', 'mlp.fc2.'),
)
_OPENMMLAB_TOP_RENAMES = (
    ('patch_embed.projection.', 'patch_embed.proj.'),
    ('ln_pre.', 'norm_pre.'),  # mmseg's pre_norm
    ('pre_norm.', 'norm_pre.'),  # mmpretrain's
    ('ln1.', 'norm.'),
    ('ln2.', 'fc_norm.'),
)
#: OpenMMLab's names of our parameters, mmseg's where its ViT has them
#: (``frozen_exclude`` matches them); the FFN's gate scores and merged
#: linear stay under mmseg's ``ffn``.
_TO_OPENMMLAB_BLOCK_RENAMES = tuple(
    (new, old) for old, new in _OPENMMLAB_BLOCK_RENAMES
) + (('mlp.', 'ffn.'),)
_TO_OPENMMLAB_TOP_RENAMES = tuple(
    (new, old) for old, new in _OPENMMLAB_TOP_RENAMES
)


def has_layer_scale(state_dict: Mapping) -> bool:
    """Whether ViT weights carry LayerScale (timm, official DeiT-III,
    official DINOv2 or mmpretrain names)."""
    return any(
        key.endswith('.ls1.gamma')
        or DEIT3_GAMMA.match(key)
        or _OPENMMLAB_GAMMA.match(key)
        for key in state_dict
    )


def has_window_keys(state_dict: Mapping) -> bool:
    """Whether ViT-like weights are a windowed ViT's (SAM's image encoder,
    ViTDet): decomposed relative positions, an NHWC position embedding or
    SAM's neck, which a plain ViT has none of."""
    pos_embed = state_dict.get('pos_embed')
    return (
        any(key.endswith('attn.rel_pos_h') for key in state_dict)
        or getattr(pos_embed, 'ndim', 3) == 4
        or 'neck.0.weight' in state_dict
        or 'channel_reduction.0.weight' in state_dict
    )


def is_openmmlab_vit_state_dict(state_dict: Mapping) -> bool:
    return all(k in state_dict for k in OPENMMLAB_VIT_MARKERS) and any(
        map(_OPENMMLAB_BLOCK_KEY.match, state_dict)
    )


def rename_key(rest: str, renames) -> str:
    for old, new in renames:
        if rest.startswith(old):
            return new + rest[len(old) :]
    return rest


def openmmlab_name(key: str) -> str:
    """The name OpenMMLab's ViT gives our parameter ``key``
    (``blocks.0.attn.qkv.weight`` -> ``layers.0.attn.attn.in_proj_weight``,
    mmseg's)."""
    match = _BLOCK_KEY.match(key)
    if match:
        return f'layers.{match.group(1)}.' + rename_key(
            match.group(2), _TO_OPENMMLAB_BLOCK_RENAMES
        )
    return rename_key(key, _TO_OPENMMLAB_TOP_RENAMES)


def from_openmmlab_layout(state_dict: Mapping) -> 'OrderedDict':
    """mmpretrain's / mmseg's ViT tensors in timm's layout (same values)."""
    out = OrderedDict()
    for key, value in state_dict.items():
        match = _OPENMMLAB_BLOCK_KEY.match(key)
        if match:
            key = f'blocks.{match.group(1)}.' + rename_key(
                match.group(2), _OPENMMLAB_BLOCK_RENAMES
            )
        else:
            key = rename_key(key, _OPENMMLAB_TOP_RENAMES)
        out[key] = value
    # mmseg's ViT has no patch-embedding bias by default, and with
    # qkv_bias=False no attention output bias: zero biases compute the same.
    for weight_key in [
        k
        for k in out
        if k == 'patch_embed.proj.weight' or k.endswith('.attn.proj.weight')
    ]:
        bias_key = weight_key[: -len('weight')] + 'bias'
        if bias_key not in out:
            weight = out[weight_key]
            out[bias_key] = weight.new_zeros(weight.shape[0])
    return out


#: The authors' search network (their train_stage1_step2.py) wraps each
#: timm block: ``blocks.N.block.<timm key>``, its attention as
#: ``attn.attention.*`` next to the score ``attn.learn_mask``, its GELU as
#: ``mlp.act`` holding ``learn_mask``.
_AUTHORS_SEARCH_KEY = re.compile(r'^blocks\.(\d+)\.block\.(.+)$')


def from_authors_search_layout(state_dict: Mapping) -> 'OrderedDict':
    """The weights of an authors' search checkpoint in timm's layout, as a
    dense network: their gates' open/closed flags are plain attributes,
    never saved, so the file cannot say its spec (their log does), and its
    scores (``learn_mask``) are dropped."""
    out = OrderedDict()
    for key, value in state_dict.items():
        match = _AUTHORS_SEARCH_KEY.match(key)
        if match:
            rest = match.group(2)
            if rest.endswith('learn_mask'):
                continue
            key = f'blocks.{match.group(1)}.' + rename_key(
                rest, (('attn.attention.', 'attn.'),)
            )
        out[key] = value
    return out


def canonical_layout(state_dict: Mapping) -> Mapping:
    """ViT tensors in timm's layout, from any layout this family reads."""
    if any(map(_AUTHORS_SEARCH_KEY.match, state_dict)):
        return from_authors_search_layout(state_dict)
    if is_openmmlab_vit_state_dict(state_dict) and not is_vit_state_dict(
        state_dict
    ):
        return from_openmmlab_layout(state_dict)
    return state_dict


def merge_ffn_weights(
    fc1_weight: torch.Tensor,
    fc1_bias: Optional[torch.Tensor],
    fc2_weight: torch.Tensor,
    fc2_bias: Optional[torch.Tensor],
    layer_scale: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """``fc2(fc1(x)) = W x + b`` with ``W = W2 W1`` and ``b = W2 b1 + b2``;
    a LayerScale ``gamma`` after the FFN folds in: ``W = diag(gamma) W2 W1``,
    ``b = gamma * (W2 b1 + b2)``.

    Computed in float64 so that the merged layer matches the two-layer
    computation to fp32 rounding, then cast back.
    """
    dtype = fc2_weight.dtype
    w1, w2 = fc1_weight.double(), fc2_weight.double()
    if layer_scale is not None:
        w2 = layer_scale.double()[:, None] * w2
        fc2_bias = (
            None
            if fc2_bias is None
            else layer_scale.double() * fc2_bias.double()
        )
    weight = w2 @ w1
    bias = None
    if fc1_bias is not None or fc2_bias is not None:
        bias = torch.zeros(w2.shape[0], dtype=torch.float64)
        if fc1_bias is not None:
            bias = bias + w2 @ fc1_bias.double()
        if fc2_bias is not None:
            bias = bias + fc2_bias.double()
        bias = bias.to(dtype)
    return weight.to(dtype), bias


def block_indices(state_dict: Mapping) -> List[int]:
    return sorted(
        {int(m.group(1)) for m in map(_BLOCK_KEY.match, state_dict) if m}
    )


def is_vit_state_dict(state_dict: Mapping) -> bool:
    return all(k in state_dict for k in VIT_MARKERS) and bool(
        block_indices(state_dict)
    )


def infer_layout(state_dict: Mapping) -> Dict[str, object]:
    """What the keys alone say: depth, blocks without attention weights,
    blocks with a merged FFN, and whether gate parameters are present."""
    depth = max(block_indices(state_dict), default=-1) + 1
    attn_missing = [
        i
        for i in range(depth)
        if f'blocks.{i}.attn.qkv.weight' not in state_dict
    ]
    merged = [
        i for i in range(depth) if f'blocks.{i}.mlp.fc.weight' in state_dict
    ]
    ffn_missing = [
        i
        for i in range(depth)
        if f'blocks.{i}.mlp.fc1.weight' not in state_dict
        and f'blocks.{i}.mlp.fc.weight' not in state_dict
    ]
    gated = any(k.endswith(GATE_SUFFIXES) for k in state_dict)
    # Whole-branch removal: removed attention without its LayerNorm, or
    # gated FFN branches.
    whole_branch = (
        any(f'blocks.{i}.norm1.weight' not in state_dict for i in attn_missing)
        or bool(ffn_missing)
        or any(k.endswith('mlp.hetdpt_gate') for k in state_dict)
    )
    return dict(
        depth=depth,
        attn_missing=attn_missing,
        merged=merged,
        gated=gated,
        ffn_missing=ffn_missing,
        whole_branch=whole_branch,
    )


def gate_spec(state_dict: Mapping, depth: int) -> PruneSpec:
    """The spec encoded by the closed gates of a gated-form state dict."""
    closed = {}
    for kind, path in (('attn', 'attn'), ('act', 'mlp.act'), (FFN, 'mlp')):
        closed[kind] = [
            i
            for i in range(depth)
            if float(state_dict.get(f'blocks.{i}.{path}.hetdpt_gate', 1.0))
            < 0.5
        ]
    return PruneSpec(
        depth, closed['attn'], closed['act'], ffn_removed=closed[FFN]
    )


def _removed_key(
    rest: str, index: int, spec: PruneSpec, whole_branch: bool
) -> bool:
    """Whether block ``index``'s key ``rest`` belongs to a removed layer:
    a removed attention (with its LayerNorm and LayerScale under
    whole-branch removal) or a removed FFN branch."""
    if index >= spec.depth:
        return False
    attn = ('attn.', 'norm1.', 'ls1.') if whole_branch else ('attn.',)
    return (spec.is_removed('attn', index) and rest.startswith(attn)) or (
        spec.is_removed(FFN, index)
        and rest.startswith(('norm2.', 'mlp.', 'ls2.'))
    )


def convert_state_dict(
    state_dict: Mapping,
    spec: PruneSpec,
    form: str,
    semantics: Optional[Mapping] = None,
) -> 'OrderedDict[str, torch.Tensor]':
    """Return ``state_dict`` in the layout of a ``form`` network with
    ``spec`` and ``semantics``; the input is not modified.

    Handles: dropping the weights of removed attention sublayers (dense or
    gated input; with whole-branch removal their LayerNorm and LayerScale
    too) and of removed FFN branches, dropping gate parameters (gated
    input, non-gated output),
    and merging ``fc1``/``fc2`` of GELU-removed blocks (``form='merged'``),
    with the block's LayerScale ``ls2.gamma`` folded in where it has one.
    Raises :class:`CheckpointError` when the weights cannot produce the
    requested layout (e.g. un-merging a merged FFN).
    """
    whole_branch = (semantics or {}).get('removed_attn_output') == WHOLE_BRANCH
    out = OrderedDict()
    for key, value in state_dict.items():
        match = _BLOCK_KEY.match(key)
        if match and form != 'gated':
            index, rest = int(match.group(1)), match.group(2)
            if rest.endswith(GATE_SUFFIXES) or _removed_key(
                rest, index, spec, whole_branch
            ):
                continue
        out[key] = value
    for index in spec.act_removed:
        prefix = f'blocks.{index}.mlp.'
        has_merged = f'{prefix}fc.weight' in out
        has_split = f'{prefix}fc1.weight' in out
        if form == 'merged' and has_split:
            weight, bias = merge_ffn_weights(
                out.pop(f'{prefix}fc1.weight'),
                out.pop(f'{prefix}fc1.bias', None),
                out.pop(f'{prefix}fc2.weight'),
                out.pop(f'{prefix}fc2.bias', None),
                out.pop(f'blocks.{index}.ls2.gamma', None),
            )
            out[f'{prefix}fc.weight'] = weight
            if bias is not None:
                out[f'{prefix}fc.bias'] = bias
        elif form != 'merged' and has_merged:
            raise CheckpointError(f'{prefix}fc is merged: build merged=True')
    for index in range(spec.depth):
        if (
            index not in spec.act_removed
            and f'blocks.{index}.mlp.fc.weight' in out
        ):
            raise CheckpointError(
                f'block {index} is merged, the spec keeps it'
            )
    return out


def resize_pos_embed(
    pos_embed: torch.Tensor,
    src_prefix: int,
    dst_prefix: int,
    dst_grid: Tuple[int, int],
    mode: str = 'bicubic',
    antialias: bool = False,
) -> torch.Tensor:
    """Adapt a ``(1, prefix + H*W, D)`` position embedding to another grid
    and number of prefix tokens (class / distillation token); ``antialias``
    when shrinking, as timm's loaders do (DeiT checkpoints load without)."""
    from timm.layers import resample_abs_pos_embed

    if dst_prefix > src_prefix:
        raise CheckpointError(
            'pos_embed lacks prefix tokens: set distilled as the file'
        )
    pos_embed = torch.cat(
        [pos_embed[:, :dst_prefix], pos_embed[:, src_prefix:]], dim=1
    )
    num_patches = pos_embed.shape[1] - dst_prefix
    side = int(round(num_patches**0.5))
    if side * side != num_patches and num_patches == math.prod(dst_grid):
        return pos_embed  # a non-square grid: the configured one
    if side * side != num_patches:
        raise CheckpointError(f'pos_embed: {num_patches} is no square')
    if (side, side) == tuple(dst_grid):
        return pos_embed
    return resample_abs_pos_embed(
        pos_embed,
        list(dst_grid),
        old_size=[side, side],
        num_prefix_tokens=dst_prefix,
        interpolation=mode,
        antialias=antialias,
    )
