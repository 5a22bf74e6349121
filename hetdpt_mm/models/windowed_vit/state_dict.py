"""Checkpoint layouts of the windowed ViTs, read into the family's own in
one place (:func:`canonical_layout`).

The family's own layout is timm's ``VisionTransformerSAM`` (relative to the
backbone)::

    patch_embed.proj.*, pos_embed (1, H, W, D)
    blocks.{i}.norm1.*, blocks.{i}.attn.{qkv,proj}.*,
    blocks.{i}.attn.rel_pos_h, blocks.{i}.attn.rel_pos_w,
    blocks.{i}.norm2.*, blocks.{i}.mlp.{fc1,fc2}.*  (merged: mlp.fc.*)
    neck.{0,1,2,3}.*                                SAM's conv neck

whose per-block keys are the ViT family's, so its surgery
(:mod:`..vit.state_dict`) converts them.  Read into it: the official SAM
release (``image_encoder.*``, ``mlp.lin1`` / ``lin2``), mmpretrain's
``ViTSAM`` (``layers.{i}.ln1``, ``ffn.layers``, ``channel_reduction``),
detectron2's and mmdet's ViTDet (``pos_embed`` of ``(1, [1 +] H*W, D)``
with the class token's unused slot of MAE pretraining; detectron2's
``backbone.net.*``), and a plain ViT's (MAE's, DeiT's, in timm's layout)
as a dense start: its class token, final norm and heads have no place
here, and the relative position tables it lacks stay at their
initialisation (zeros), as when ViTDet starts from MAE."""

import math
import re
from collections import OrderedDict
from typing import Mapping

import torch
import torch.nn.functional as F

from ...errors import CheckpointError
from ..vit.state_dict import has_window_keys, rename_key

OWN_MARKERS = ('patch_embed.proj.weight', 'blocks.0.norm1.weight')
#: The official SAM checkpoint holds the whole model; detectron2's ViTDet
#: wraps the ViT as ``net`` of its feature pyramid.
WRAPPER_PREFIXES = ('image_encoder.', 'net.')
MMPRETRAIN_MARKERS = ('patch_embed.projection.weight', 'layers.0.ln1.weight')
_MMPRETRAIN_BLOCK = re.compile(r'^layers\.(\d+)\.(.+)$')
_MMPRETRAIN_BLOCK_RENAMES = (
    ('ln1.', 'norm1.'),
    ('ln2.', 'norm2.'),
    ('ffn.layers.0.0.', 'mlp.fc1.'),
    ('ffn.layers.1.', 'mlp.fc2.'),
)
_TOP_RENAMES = (
    ('patch_embed.projection.', 'patch_embed.proj.'),
    ('channel_reduction.', 'neck.'),
)
#: The official SAM names of the FFN's linears.
_SAM_MLP = re.compile(r'^(blocks\.\d+\.mlp\.)lin([12])\.')
#: Keys of classifier heads and of the plain ViT's tokens and final norms,
#: which no windowed ViT has.
_NOT_OURS = ('head.', 'cls_token', 'dist_token', 'norm.', 'fc_norm.')


def is_windowed_state_dict(state: Mapping) -> bool:
    """Whether ``state`` holds a windowed ViT in any layout read here."""
    if any(p + OWN_MARKERS[0] in state for p in WRAPPER_PREFIXES):
        return True
    return (
        all(k in state for k in OWN_MARKERS)
        or all(k in state for k in MMPRETRAIN_MARKERS)
    ) and has_window_keys(state)


def canonical_layout(state: Mapping) -> 'OrderedDict':
    """Windowed-ViT tensors in the family's layout, from any read here."""
    wrapper = next(
        (p for p in WRAPPER_PREFIXES if p + OWN_MARKERS[0] in state), ''
    )
    out = OrderedDict()
    for key, value in state.items():
        if not key.startswith(wrapper):
            continue  # SAM's prompt encoder and mask decoder, ViTDet's FPN
        key = key[len(wrapper) :]
        block = _MMPRETRAIN_BLOCK.match(key)
        if block:
            key = f'blocks.{block.group(1)}.' + rename_key(
                block.group(2), _MMPRETRAIN_BLOCK_RENAMES
            )
        else:
            key = rename_key(key, _TOP_RENAMES)
        key = _SAM_MLP.sub(r'\1fc\2.', key)
        if key.startswith(_NOT_OURS):
            continue
        if key == 'pos_embed' and value.dim() == 3:
            value = grid_pos_embed(value)
        out[key] = value
    return out


def grid_pos_embed(pos_embed: torch.Tensor) -> torch.Tensor:
    """A ``(1, [1 +] S*S, D)`` position embedding (ViTDet's, MAE's: the
    first row the class token's, unused) as the ``(1, S, S, D)`` grid."""
    length = pos_embed.shape[1]
    if math.isqrt(length) ** 2 != length:
        pos_embed = pos_embed[:, 1:]
    side = math.isqrt(pos_embed.shape[1])
    if side * side != pos_embed.shape[1]:
        raise CheckpointError(f'pos_embed of {length} positions: no grid')
    return pos_embed.reshape(1, side, side, -1)


def resize_rel_pos(table: torch.Tensor, length: int) -> torch.Tensor:
    """A ``(L, head_dim)`` relative position table linearly resampled to
    ``length`` rows, as mmpretrain's ``ViTSAM`` and the references' forward
    pass do."""
    if table.shape[0] == length:
        return table
    resized = F.interpolate(table.float().T[None], size=length, mode='linear')[
        0
    ].T
    return resized.to(table.dtype).contiguous()
