"""Checkpoint layouts of LayerScale ViTs (DeiT-III, DINOv2), read into
timm's layout in one place (:func:`canonical_layout`).

timm's layout (``deit3_*``, ``vit_*_dinov2``, ``vit_*_reg4_dinov2``) is the
family's own: the ViT keys of ``state_dict.py`` plus::

    blocks.{i}.ls1.gamma, blocks.{i}.ls2.gamma   LayerScale (attention, FFN)
    reg_token                                    (1, R, D) register tokens
    pos_embed                                    (1, P + H*W, D)

where the ``P`` prefix tokens that have a position are none (DeiT-III, the
register models: ``no_embed_class``) or the class token (DINOv2 without
registers).

A SwiGLU FFN (DINOv2-g) keeps timm's packed names: ``mlp.fc1`` maps ``D`` to
both halves ``[x1, x2]`` (``SiLU(x1) * x2``), ``mlp.fc2`` the half back to
``D``.  The tensor surgery is the ViT family's (``state_dict.py``), which
folds ``ls2.gamma`` into a merged FFN.
"""

import math
import re
from collections import OrderedDict
from typing import Mapping

from ...errors import CheckpointError
from ..vit.state_dict import DEIT3_GAMMA

#: The official DINOv2 SwiGLU FFN: ``w12`` (both halves), ``w3``.
_DINOV2_SWIGLU = re.compile(r'^(blocks\.\d+\.mlp\.)(w12|w3)\.(weight|bias)$')
_DINOV2_SWIGLU_NAMES = {'w12': 'fc1', 'w3': 'fc2'}


def canonical_layout(state_dict: Mapping) -> 'OrderedDict':
    """LayerScale ViT tensors in timm's layout, from timm's, the official
    DeiT-III or the official facebookresearch DINOv2 layout (mmpretrain's
    is renamed to timm's first, by the ViT family's
    ``canonical_layout``).

    DINOv2: ``mask_token`` (used by its self-supervised training only) is
    dropped, ``w12`` / ``w3`` become ``fc1`` / ``fc2``; with registers, as
    timm converts them, ``register_tokens`` become ``reg_token`` and the class
    token's position is added into the class token, leaving a position
    embedding of the patches only (the official model adds the class
    position, then inserts the registers without one: the same function).
    """
    out = OrderedDict()
    registers = 'register_tokens' in state_dict
    for key, value in state_dict.items():
        if key == 'mask_token':
            continue
        if registers and key == 'register_tokens':
            key = 'reg_token'
        elif registers and key == 'cls_token':
            value = value + state_dict['pos_embed'][:, :1]
        elif registers and key == 'pos_embed':
            value = value[:, 1:]
        gamma = DEIT3_GAMMA.match(key)
        swiglu = _DINOV2_SWIGLU.match(key)
        if gamma:
            key = f'{gamma.group(1)}ls{gamma.group(2)}.gamma'
        elif swiglu:
            key = (
                f'{swiglu.group(1)}{_DINOV2_SWIGLU_NAMES[swiglu.group(2)]}'
                f'.{swiglu.group(3)}'
            )
        out[key] = value
    return out


def positioned_prefix_tokens(state_dict: Mapping) -> int:
    """How many prefix tokens have a position in ``pos_embed`` (timm
    layout): none when it holds a square grid (``no_embed_class``), else the
    class (and distillation) token."""
    length = state_dict['pos_embed'].shape[1]
    if math.isqrt(length) ** 2 == length:
        return 0
    prefix = int('cls_token' in state_dict) + int('dist_token' in state_dict)
    if 'reg_token' in state_dict:
        prefix += state_dict['reg_token'].shape[1]
    side = math.isqrt(length - prefix)
    if side * side != length - prefix:
        raise CheckpointError(f'pos_embed of {length} positions: no grid')
    return prefix
