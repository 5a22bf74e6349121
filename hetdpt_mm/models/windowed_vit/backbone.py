"""HetDPTWindowedViT: the plain ViTs of SAM's image encoder and ViTDet,
whose blocks attend within windows or globally, with removable attention
sublayers (windowed or global) and FFN GELUs (HetDPT), for mmpretrain, mmdet
and mmseg (docs/user_guides/sam_vitdet.md).  Its codec is :mod:`.codec`."""

from functools import partial
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmengine.logging import print_log
from timm.layers import (
    LayerNorm2d,
    PatchEmbed,
    resample_abs_pos_embed_nhwc,
    trunc_normal_,
)
from timm.models.vision_transformer import init_weights_vit_timm
from torch.utils.checkpoint import checkpoint

from ...spec import ACT, ATTN, PruneSpec
from ..backbone_args import check_frozen_stages, init_cfg_with_pretrained
from ..family import HetDPTBackbone
from ..layer_decay import vit_layer_depth
from ..vit.codec import RELEASED_SEMANTICS
from ..vit.stock_args import DEFAULT_NORM_EPS, block_indices
from . import codec as windowed_codec
from . import state_dict as windowed_state_dict
from .codec import resolve_windowed_arch, window_blocks
from .layers import build_windowed_block
from .stock_args import TOOLBOX_DEFAULTS, read_stock_args

#: mmpretrain's ``out_type`` names: maps (``'raw'`` is ``'featmap'``) or
#: their average over positions.
OUT_TYPES = ('featmap', 'raw', 'avg_featmap')


def _pair(size) -> Tuple[int, int]:
    return tuple(size) if isinstance(size, Sequence) else (size, size)


class HetDPTWindowedViT(HetDPTBackbone):
    """SAM's image encoder / ViTDet's backbone with removable attention
    sublayers and FFN GELUs (HetDPT): blocks attend within windows of
    ``window_size`` (padded at the bottom and right) except the global ones
    of ``arch``, all with decomposed relative positions; outputs NCHW maps
    (through SAM's conv neck when ``out_channels``), as mmpretrain's
    ``ViTSAM`` and timm's ``samvit_*``.

    Args:
        arch: ``'base'``, ``'large'``, ``'huge'`` (mmpretrain's ``'b'``,
            ``'l'``, ``'h'``) or a dict with ``embed_dims``, ``num_layers``,
            ``num_heads``, ``mlp_ratio`` (or ``feedforward_channels``) and
            ``global_attn_indexes``.
        img_size: the size the global blocks' relative position tables (and
            the position embedding, unless ``pretrain_img_size``) are made
            for; other inputs read both resampled, as the references do.
        window_size: the windows' side (0: every block global).
        pretrain_img_size: the size the position embedding is stored at
            (ViTDet's: MAE's 224); ``None``: ``img_size``.
        out_channels: SAM's neck (1x1 and 3x3 convs with LayerNorm2d) to
            this width, on every output; 0: none (ViTDet).
        out_indices: blocks whose maps are returned.
        out_type: ``'featmap'`` / ``'raw'`` (NCHW) or ``'avg_featmap'``.
        prune_spec, gated, merged, removed_attn_output, residual_gelu: the
            HetDPT structure, as for :class:`HetDPTViT`; specs index the
            blocks, windowed and global alike.
        use_abs_pos, use_rel_pos, qkv_bias, norm_cfg: as mmpretrain's
            ``ViTSAM`` (LayerNorm epsilon 1e-6; timm's ``samvit_*``: 1e-5).
        interpolate_mode, pos_embed_antialias: how the position embedding
            is resampled (timm antialiases, mmpretrain and ViTDet do not).
        token_merge, graph_propagation: refused: windowed attention needs
            every window whole (docs/user_guides/token_merge.md).
        frozen_stages: as mmpretrain's ``ViTSAM``: ``N > 0`` freezes the
            embeddings and blocks ``0 .. N-1`` (the neck too when ``N`` is
            the depth).
        with_cp: gradient checkpointing of every block in training.
        pretrained, init_cfg: a ``Pretrained`` checkpoint: ours, timm's,
            the official SAM, mmpretrain's, ViTDet's (detectron2, mmdet) or
            a plain ViT's (MAE) as a dense start.
    """

    family = 'windowed_vit'
    STARTS_FROM = ('vit',)  # MAE's plain ViT starts a ViTDet
    codec = windowed_codec
    RECORD_ARCH_KEYS = frozenset(
        {
            'arch',
            'img_size',
            'patch_size',
            'in_channels',
            'window_size',
            'out_channels',
            'qkv_bias',
            'use_abs_pos',
            'use_rel_pos',
            'pretrain_img_size',
            'norm_cfg',
        }
    )
    SMALL_ARGS = dict(
        arch=dict(
            embed_dims=48,
            num_layers=6,
            num_heads=3,
            global_attn_indexes=[2, 5],
        ),
        img_size=32,
        patch_size=4,
        window_size=3,
        out_channels=32,
    )
    DEFAULT_ARCH = 'base'
    TOOLBOX_DEFAULTS = TOOLBOX_DEFAULTS

    def __init__(
        self,
        arch: Union[str, Mapping] = 'base',
        img_size=1024,
        patch_size: int = 16,
        in_channels: int = 3,
        window_size: int = 14,
        out_channels: int = 256,
        out_indices: Union[int, Sequence[int]] = -1,
        out_type: str = 'featmap',
        prune_spec=None,
        gated: bool = False,
        merged: Optional[bool] = None,
        removed_attn_output: Optional[str] = None,
        residual_gelu: Optional[str] = None,
        pretrain_img_size=None,
        use_abs_pos: bool = True,
        use_rel_pos: bool = True,
        qkv_bias: bool = True,
        drop_rate: float = 0.0,
        attn_drop_rate: float = 0.0,
        drop_path_rate: float = 0.0,
        interpolate_mode: str = 'bicubic',
        pos_embed_antialias: bool = True,
        with_cp: bool = False,
        frozen_stages: int = -1,
        token_merge: Optional[Mapping] = None,
        graph_propagation: Optional[Mapping] = None,
        pretrained: Optional[str] = None,
        init_cfg: Optional[Union[dict, List[dict]]] = None,
        **stock_args,
    ):
        if token_merge is not None or graph_propagation is not None:
            raise ValueError('token merging needs a ViT, not windows')
        if out_type not in OUT_TYPES:
            raise ValueError(f'out_type must be one of {OUT_TYPES}')
        eps = read_stock_args(stock_args, type(self))
        super().__init__(
            init_cfg=init_cfg_with_pretrained(pretrained, init_cfg)
        )
        self.arch_settings = resolve_windowed_arch(arch)
        depth = self.arch_settings['num_layers']
        dim = self.arch_settings['embed_dims']
        check_frozen_stages(frozen_stages, depth, 'blocks')
        self.img_size = _pair(img_size)
        self.pos_embed_size = _pair(pretrain_img_size or img_size)
        self.window_size = window_size
        self.out_indices = block_indices(out_indices, depth)
        self.out_type = out_type
        self.interpolate_mode = interpolate_mode
        self.pos_embed_antialias = pos_embed_antialias
        self.with_cp = with_cp
        self.frozen_stages = max(frozen_stages, 0)
        spec, form, semantics = self._initial_structure(
            depth,
            prune_spec,
            gated,
            merged,
            RELEASED_SEMANTICS,
            removed_attn_output=removed_attn_output,
            residual_gelu=residual_gelu,
        )
        self._build_args = dict(
            arch=dict(self.arch_settings),
            img_size=self.img_size,
            patch_size=patch_size,
            in_channels=in_channels,
            window_size=window_size,
            out_channels=out_channels,
            qkv_bias=qkv_bias,
            use_abs_pos=use_abs_pos,
            use_rel_pos=use_rel_pos,
        )
        if self.pos_embed_size != self.img_size:
            self._build_args['pretrain_img_size'] = self.pos_embed_size
        if eps != DEFAULT_NORM_EPS:
            self._build_args['norm_cfg'] = dict(type='LN', eps=eps)

        self.patch_embed = PatchEmbed(
            img_size=self.img_size,
            patch_size=patch_size,
            in_chans=in_channels,
            embed_dim=dim,
            output_fmt='NHWC',
            strict_img_size=False,
            dynamic_img_pad=True,  # inputs padded (bottom / right)
        )
        grid = [side // patch_size for side in self.img_size]
        pos_grid = [side // patch_size for side in self.pos_embed_size]
        self.pos_embed = (
            nn.Parameter(torch.zeros(1, *pos_grid, dim))
            if use_abs_pos
            else None
        )
        self.pos_drop = nn.Dropout(drop_rate)
        # Stochastic depth grows linearly with the block index (as timm).
        self._block_args = dict(
            dim=dim,
            num_heads=self.arch_settings['num_heads'],
            mlp_ratio=self.arch_settings['mlp_ratio'],
            qkv_bias=qkv_bias,
            proj_drop=drop_rate,
            norm_layer=partial(nn.LayerNorm, eps=eps),
            attn_args=dict(
                qkv_bias=qkv_bias,
                attn_drop=attn_drop_rate,
                proj_drop=drop_rate,
                use_rel_pos=use_rel_pos,
                input_size=tuple(grid),
            ),
            drop_path=[
                drop_path_rate * i / max(depth - 1, 1) for i in range(depth)
            ],
        )
        self._build_structure(spec, form, semantics)
        self.neck = (
            nn.Sequential(
                nn.Conv2d(dim, out_channels, 1, bias=False),
                LayerNorm2d(out_channels),
                nn.Conv2d(
                    out_channels, out_channels, 3, padding=1, bias=False
                ),
                LayerNorm2d(out_channels),
            )
            if out_channels
            else None
        )
        self._freeze(self._frozen_modules())

    @classmethod
    def sized_args(cls, img_size) -> Dict:
        return dict(img_size=img_size)

    # --------------------------------------------------------- structure
    @property
    def window_blocks(self) -> List[int]:
        """The blocks attending within windows."""
        return window_blocks(self.arch_settings, self.window_size)

    @property
    def global_blocks(self) -> List[int]:
        """The blocks attending over the whole map."""
        windowed = set(self.window_blocks)
        return [i for i in range(self.depth) if i not in windowed]

    def layer_types(self) -> Dict[str, Tuple[str, List[int]]]:
        """The kinds, and the attention split by where it attends:
        ``attn_window`` and ``attn_global`` (MAP's three layer types with
        ``act``; docs/user_guides/sam_vitdet.md)."""
        return dict(
            super().layer_types(),
            attn_window=(ATTN, self.window_blocks),
            attn_global=(ATTN, self.global_blocks),
        )

    def _build_structure(
        self, spec: PruneSpec, form: str, semantics: Mapping
    ) -> None:
        args = self._set_structure(spec, form, semantics)
        drop_path, attn_args = args.pop('drop_path'), args.pop('attn_args')
        windowed = set(window_blocks(self.arch_settings, self.window_size))
        self.blocks = nn.ModuleList(
            [
                build_windowed_block(
                    attn_args=dict(
                        attn_args,
                        window_size=self.window_size if i in windowed else 0,
                    ),
                    drop_path=drop_path[i],
                    form=form,
                    attn_removed=spec.is_removed(ATTN, i),
                    act_removed=spec.is_removed(ACT, i),
                    **args,
                    **self.semantics,
                )
                for i in range(spec.depth)
            ]
        )
        self._freeze(self.blocks[: self.frozen_stages])  # also on rebuilds

    def _frozen_modules(self) -> List[nn.Module]:
        modules = list(self.blocks[: self.frozen_stages])
        if self.frozen_stages:
            modules += [self.patch_embed, self.pos_drop]
            if self.pos_embed is not None:
                self.pos_embed.requires_grad_(False)
            if self.frozen_stages == self.depth and self.neck is not None:
                modules.append(self.neck)
        return modules

    @property
    def depth(self) -> int:
        return len(self.blocks)

    def all_blocks(self) -> List[nn.Module]:
        return list(self.blocks)

    def get_layer_depth(
        self, param_name: str, prefix: str = ''
    ) -> Tuple[int, int]:
        """Layer depth of a parameter for layer-wise learning-rate decay
        (:func:`~.layer_decay.vit_layer_depth`: as mmpretrain's ``ViTSAM``
        and ViTDet's constructor, block ``i`` at depth ``i + 1`` whatever
        was removed from it, SAM's neck after the blocks)."""
        return vit_layer_depth(param_name, prefix, len(self.blocks))

    def _output_args(self) -> Dict:
        return dict(
            out_indices=self.out_indices,
            out_type=self.out_type,
            interpolate_mode=self.interpolate_mode,
            pos_embed_antialias=self.pos_embed_antialias,
        )

    # -------------------------------------------------------------- weights
    def init_weights(self):
        if self._init_from_cfg():
            return
        if self.pos_embed is not None:
            trunc_normal_(self.pos_embed, std=0.02)
        for block in self.blocks:
            block.apply(init_weights_vit_timm)

    def _adapt_pretrained(self, state: Dict) -> Dict:
        own = self.state_dict()
        resized = []
        for key, value in state.items():
            if key not in own or own[key].shape == value.shape:
                continue
            if key == 'pos_embed':
                state[key] = resample_abs_pos_embed_nhwc(
                    value,
                    list(own[key].shape[1:3]),
                    interpolation=self.interpolate_mode,
                    antialias=self.pos_embed_antialias,
                )
            elif key.endswith(('rel_pos_h', 'rel_pos_w')):
                state[key] = windowed_state_dict.resize_rel_pos(
                    value, own[key].shape[0]
                )
            else:
                continue
            resized.append(key)
        if resized:
            print_log(
                f'HetDPTWindowedViT: {len(resized)} position tensors '
                f'resampled to this network ({resized[0]}, ...)',
                logger='current',
            )
        return state

    # -------------------------------------------------------------- forward
    def class_feature(self, inputs: torch.Tensor) -> torch.Tensor:
        """The last output averaged over its positions (``N x C``)."""
        output = self(inputs)[-1]
        return output if output.dim() == 2 else output.mean(dim=(2, 3))

    def forward(self, x: torch.Tensor) -> tuple:
        self._check_weights_arrived()
        x = self.patch_embed(x)
        if self.pos_embed is not None:
            x = x + resample_abs_pos_embed_nhwc(
                self.pos_embed,
                list(x.shape[1:3]),
                interpolation=self.interpolate_mode,
                antialias=self.pos_embed_antialias,
            )
        x = self.pos_drop(x)
        outs = []
        for index, block in enumerate(self.blocks):
            if self.with_cp and self.training:
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
            if index in self.out_indices:
                outs.append(self._format_output(x))
        return tuple(outs)

    def _format_output(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 3, 1, 2)
        if self.neck is not None:
            x = self.neck(x)
        return x.mean(dim=(2, 3)) if self.out_type == 'avg_featmap' else x


def build_vitdet(
    img_size: int = 1024,
    patch_size: int = 16,
    in_chans: int = 3,
    embed_dim: int = 768,
    depth: int = 12,
    num_heads: int = 12,
    mlp_ratio: float = 4.0,
    qkv_bias: bool = True,
    drop_path_rate: float = 0.0,
    norm_cfg: Optional[Mapping] = None,
    act_cfg: Optional[Mapping] = None,
    use_abs_pos: bool = True,
    use_rel_pos: bool = False,
    rel_pos_zero_init: bool = True,
    window_size: int = 0,
    window_block_indexes: Sequence[int] = (0, 1, 3, 4, 6, 7, 9, 10),
    pretrain_img_size: int = 224,
    pretrain_use_cls_token: bool = True,
    **hetdpt_args,
):
    """A :class:`HetDPTWindowedViT` of the arguments of mmdet's
    ViTDet ``ViT`` (``projects/ViTDet``): the last block's map, no neck, the
    position embedding of ``pretrain_img_size`` resampled to the input as
    ViTDet does; ``pretrain_use_cls_token`` only names the layout of the
    weights it loads, which every layout here reads.  ``hetdpt_args``:
    the family's own (``prune_spec``, ``merged``, ``out_indices``,
    ``init_cfg``, ...)."""
    if dict(act_cfg or dict(type='GELU')) != dict(type='GELU'):
        raise ValueError(f'act_cfg={act_cfg!r}: HetDPT builds GELU only')
    if not rel_pos_zero_init:  # as ViTDet from MAE weights
        raise ValueError('rel_pos_zero_init=False: the tables start at zero')
    windowed = set(window_block_indexes) if window_size else set()
    hetdpt_args.setdefault('out_channels', 0)
    hetdpt_args.setdefault('pos_embed_antialias', False)
    return HetDPTWindowedViT(
        arch=dict(
            embed_dims=embed_dim,
            num_layers=depth,
            num_heads=num_heads,
            mlp_ratio=mlp_ratio,
            global_attn_indexes=[i for i in range(depth) if i not in windowed],
        ),
        img_size=img_size,
        patch_size=patch_size,
        in_channels=in_chans,
        window_size=window_size,
        pretrain_img_size=pretrain_img_size,
        qkv_bias=qkv_bias,
        drop_path_rate=drop_path_rate,
        norm_cfg=dict(type='LN', eps=1e-6) if norm_cfg is None else norm_cfg,
        use_abs_pos=use_abs_pos,
        use_rel_pos=use_rel_pos,
        **hetdpt_args,
    )


build_vitdet.__name__ = build_vitdet.__qualname__ = 'HetDPTViTDet'
