"""HetDPTLayerScaleViT: LayerScale ViTs (DeiT-III, DINOv2 with and without
register tokens, DINOv2-g's SwiGLU FFN) whose attention sublayers and FFN
activations can be removed (HetDPT), for mmpretrain, mmdet and mmseg.  Its
codec is :mod:`.codec`.  What each form leaves, and why ``gamma1`` scales
the residue of a removed attention: docs/user_guides/dinov2.md, *What a
removed layer leaves*."""

import math
from typing import Dict, Mapping, Optional, Tuple, Union

import torch
import torch.nn as nn

from ...errors import CheckpointError
from ...spec import ACT, PruneSpec
from ..vit import state_dict as vit_state_dict
from ..vit.backbone import HetDPTViT
from ..vit.codec import RELEASED_SEMANTICS
from ..vit.stock_args import (
    arch_from_stock,
    frozen_by_exclude,
    mmpretrain_arch,
    unknown_arch_message,
)
from . import codec as layerscale_codec
from . import state_dict as ls_state_dict
from .codec import (
    DICT_ARCH_DEFAULTS,
    LAYERSCALE_ARCH_PRESETS,
    mmpretrain_swiglu,
    resolve_layerscale_arch,
)

#: mmpretrain's ``layer_cfgs=dict(ffn_type=...)`` values (GELU, SwiGLU).
MMPRETRAIN_FFN_TYPES = ('origin', 'swiglu_fused')

#: What removed layers leave: the released ViT semantics, with the removed
#: attention's residue ``LN1(x)`` scaled by the block's ``gamma1``
#: (``x + gamma1 * LN1(x)``).  LayerScale exists to keep each residual
#: branch small (``gamma`` starts at 1e-5 / 1e-6): an unscaled ``LN1(x)``,
#: of unit size in every channel, would add far more to the stream than the
#: attention it replaces ever did, while the scaled residue perturbs the
#: network as little as the attention's removal itself; ``gamma1`` stays
#: trainable, so fine-tuning can grow it, and ``gamma1 = 1`` is the plain
#: ViT's rule.  It is also what timm's block computes with the attention
#: replaced, so the gated, pruned and merged forms agree with no special
#: case.  ``'zero'`` leaves ``x``; ``'identity'`` (whole-branch removal)
#: leaves ``x`` without ``LN1`` and ``gamma1``.
LAYERSCALE_SEMANTICS = dict(RELEASED_SEMANTICS)


class HetDPTLayerScaleViT(HetDPTViT):
    """A LayerScale ViT (DeiT-III, DINOv2) with removable attention
    sublayers and FFN GELUs (HetDPT); everything else as
    :class:`HetDPTViT` (outputs, fine-tuning options, weights).

    Args:
        arch: a key of :data:`LAYERSCALE_ARCH_PRESETS` (``'deit3-base'``,
            ``'dinov2-base'``, ``'dinov2-giant-reg4'``, ...) or a dict with
            ``embed_dims``, ``num_layers``, ``num_heads``, ``mlp_ratio`` and
            ``ffn`` (``'mlp'`` / ``'swiglu'``).
        img_size, patch_size: ``None``: the preset's (timm's: 224 / 16 for
            DeiT-III, 518 / 14 for DINOv2; a dict arch: 224 / 16).  The
            position embedding is resampled to ``img_size`` on loading and
            for other input sizes.
        pos_embed_antialias: resample the position embedding antialiased,
            as timm does (``True``), or not, as mmpretrain does (the default
            when mmpretrain's registry builds the backbone).
        reg_tokens: register tokens (``None``: the preset's, 4 for
            ``*-reg4``).
        no_embed_class: the position embedding covers the patches only, the
            class and register tokens have none (DeiT-III, DINOv2 with
            registers); ``None``: the preset's.
        layer_scale_init_value: initial ``gamma`` (``None``: the preset's).
        arch names of mmpretrain's ``VisionTransformer`` (``'dinov2-s'``,
        ``'base'``, ...) give its block shapes (an ``'mlp'`` FFN;
        ``layer_cfgs=dict(ffn_type='swiglu_fused')``: mmpretrain's SwiGLU).
        **kwargs: the arguments of :class:`HetDPTViT` (spec, form,
            semantics, outputs, fine-tuning, ``init_cfg``); LayerScale ViTs
            have no distillation token.
    """

    family = 'layerscale_vit'
    codec = layerscale_codec
    RECORD_ARCH_KEYS = HetDPTViT.RECORD_ARCH_KEYS | {
        'reg_tokens',
        'no_embed_class',
    }
    SMALL_ARGS = dict(
        HetDPTViT.SMALL_ARGS, layer_scale_init_value=1e-5, no_embed_class=False
    )
    DEFAULT_ARCH = 'dinov2-base'
    # Torch-Pruning does not follow the LayerScale gammas.
    WIDTH_PRUNABLE = False
    #: mmpretrain's ViT resamples positions without antialiasing; mmseg's
    #: registry gives feature maps and keeps timm's resampling, DINOv2's /
    #: DeiT-III's patch bias and eps (mmseg has no LayerScale ViT).
    TOOLBOX_DEFAULTS = dict(
        mmseg=dict(out_type='featmap', final_norm=False),
        mmpretrain=dict(pos_embed_antialias=False),
    )

    def __init__(
        self,
        arch: Union[str, Mapping] = 'dinov2-base',
        img_size=None,
        patch_size: Optional[int] = None,
        reg_tokens: Optional[int] = None,
        no_embed_class: Optional[bool] = None,
        layer_scale_init_value: Optional[float] = None,
        pos_embed_antialias: bool = True,
        **kwargs,
    ):
        # mmseg's spelling of the architecture (the rest: HetDPTViT's).
        arch = arch_from_stock(arch, self.DEFAULT_ARCH, kwargs)
        name = arch
        if isinstance(arch, str) and arch not in LAYERSCALE_ARCH_PRESETS:
            arch = mmpretrain_arch(arch)  # 'dinov2-s', 'base', ...
        if arch is None:
            raise ValueError(
                unknown_arch_message(name, LAYERSCALE_ARCH_PRESETS)
            )
        self.pos_embed_antialias = pos_embed_antialias
        defaults = (
            LAYERSCALE_ARCH_PRESETS[arch]
            if isinstance(arch, str) and arch in LAYERSCALE_ARCH_PRESETS
            else DICT_ARCH_DEFAULTS
        )
        shape = resolve_layerscale_arch(arch)
        # mmpretrain's FFN choice; other layer_cfgs are refused by HetDPTViT.
        layer_cfgs = kwargs.get('layer_cfgs')
        ffn_type = (
            layer_cfgs.get('ffn_type')
            if isinstance(layer_cfgs, Mapping)
            and set(layer_cfgs) == {'ffn_type'}
            else None
        )
        if ffn_type in MMPRETRAIN_FFN_TYPES:
            kwargs.pop('layer_cfgs')
            if ffn_type == 'swiglu_fused' and shape['ffn'] == 'mlp':
                shape = mmpretrain_swiglu(shape)
            elif ffn_type == 'origin' and shape['ffn'] == 'swiglu':
                raise ValueError(f"ffn_type='origin' for SwiGLU arch {arch!r}")
        if kwargs.get('distilled'):
            raise ValueError('LayerScale ViTs have no distillation token')

        def given(value, name):
            return defaults[name] if value is None else value

        reg_tokens = int(given(reg_tokens, 'reg_tokens'))
        if reg_tokens < 0:
            raise ValueError(f'reg_tokens must be >= 0, got {reg_tokens}')
        # Read by _build_structure, which HetDPTViT.__init__ calls.
        self.ffn = shape.pop('ffn')
        self.layer_scale_init_value = given(
            layer_scale_init_value, 'layer_scale_init_value'
        )
        if not self.layer_scale_init_value:
            raise ValueError('layer_scale_init_value must be non-zero')
        super().__init__(
            arch=shape,
            img_size=given(img_size, 'img_size'),
            patch_size=given(patch_size, 'patch_size'),
            **kwargs,
        )
        self.no_embed_class = bool(given(no_embed_class, 'no_embed_class'))
        self._build_args['arch'] = dict(self.arch_settings, ffn=self.ffn)
        self._build_args.update(
            reg_tokens=reg_tokens, no_embed_class=self.no_embed_class
        )
        # Register tokens follow the class token; the position embedding
        # (sized by HetDPTViT for the class token) is rebuilt to cover the
        # prefix tokens only when they have positions.
        dim = self.arch_settings['embed_dims']
        self.reg_token = (
            nn.Parameter(torch.zeros(1, reg_tokens, dim))
            if reg_tokens
            else None
        )
        if self.reg_token is not None:
            nn.init.normal_(self.reg_token, std=1e-6)
        self.num_prefix_tokens += reg_tokens
        self.pos_embed = nn.Parameter(
            torch.zeros(
                1, self.num_positioned_tokens + math.prod(self.patch_grid), dim
            )
        )
        if self.frozen_stages:
            for param in (self.pos_embed, self.reg_token):
                if param is not None:
                    param.requires_grad_(False)
        frozen_by_exclude(self, self.frozen_exclude)  # the new tokens too

    @property
    def num_positioned_tokens(self) -> int:
        """Prefix tokens with a position in ``pos_embed``."""
        return 0 if self.no_embed_class else self.num_prefix_tokens

    # --------------------------------------------------------- structure
    def check_removable(self, spec: PruneSpec) -> None:
        """Refuse to remove the activation of a SwiGLU FFN."""
        if self.ffn == 'swiglu' and spec.act_removed:
            blocks = list(spec.act_removed)
            raise ValueError(
                f'block(s) {blocks}: a SwiGLU activation cannot be removed'
            )

    def _build_structure(
        self, spec: PruneSpec, form: str, semantics: Mapping
    ) -> None:
        self.check_removable(spec)
        super()._build_structure(spec, form, semantics)

    def _family_block_args(self) -> Dict:
        return dict(ffn=self.ffn, init_values=self.layer_scale_init_value)

    def gates(self, kind: str):
        if kind == ACT and self.ffn == 'swiglu' and self.form == 'gated':
            return []  # a SwiGLU activation is never removed
        return super().gates(kind)

    def set_spec(self, spec) -> None:
        self.check_removable(PruneSpec.coerce(spec, self.depth))
        super().set_spec(spec)

    def get_layer_depth(
        self, param_name: str, prefix: str = ''
    ) -> Tuple[int, int]:
        """As :meth:`HetDPTViT.get_layer_depth`; register tokens are
        embeddings (depth 0)."""
        if param_name == prefix + 'reg_token':
            return 0, len(self.blocks) + 2
        return super().get_layer_depth(param_name, prefix)

    # -------------------------------------------------------------- weights
    def _adapt_pretrained(self, state: Dict) -> Dict:
        if 'pos_embed' not in state:
            return state
        positioned = ls_state_dict.positioned_prefix_tokens(state)
        if positioned != self.num_positioned_tokens:
            raise CheckpointError(
                f'pos_embed has {positioned} prefix tokens: set reg_tokens, '
                "or type='HetDPTDeiT3'"
            )
        state['pos_embed'] = vit_state_dict.resize_pos_embed(
            state['pos_embed'],
            positioned,
            positioned,
            self.patch_grid,
            self.interpolate_mode,
            antialias=self.pos_embed_antialias,
        )
        return state

    def _output_args(self) -> Dict:
        return dict(
            super()._output_args(),
            pos_embed_antialias=self.pos_embed_antialias,
        )

    # -------------------------------------------------------------- forward
    def _prefix_tokens(self):
        return (self.cls_token, self.reg_token)
