"""HetDPTSwin: a Swin Transformer backbone whose window-attention sublayers
(W-MSA and SW-MSA) and FFN GELUs can be removed (HetDPT), for mmpretrain,
mmdet and mmseg (docs/user_guides/swin.md).  Its codec is
:mod:`.codec`."""

from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmengine.logging import print_log
from timm.layers import PatchEmbed, trunc_normal_
from torch.utils.checkpoint import checkpoint

from ...spec import ACT, ATTN, PruneSpec
from ..backbone_args import check_frozen_stages, init_cfg_with_pretrained
from ..family import HetDPTBackbone
from ..layer_decay import swin_layer_depth
from . import codec as swin_codec
from . import state_dict as swin_state_dict
from .codec import SWIN_SEMANTICS
from .layers import PatchMerging, SwinStage, build_swin_block
from .stock_args import (
    TOOLBOX_DEFAULTS,
    read_stock_args,
    toolbox_args,
)


class HetDPTSwin(HetDPTBackbone):
    """Swin Transformer with removable window-attention sublayers and FFN
    GELUs (HetDPT); outputs as mmdet's / mmseg's ``SwinTransformer``.

    Specs index the blocks of all stages in order (Swin-T: 2 + 2 + 6 + 2 =
    12 blocks; block 4 is the first of stage 3).

    Args:
        arch: ``'tiny'``, ``'small'``, ``'base'``, ``'large'`` or a dict
            with ``embed_dims``, ``depths``, ``num_heads`` (per stage) and
            optionally ``mlp_ratio``.
        window_size: window side of every stage (7; 12 for the 384²
            models); tables of loaded weights made for another window are
            resampled (bicubic).
        prune_spec, gated, merged, removed_attn_output, residual_gelu: the
            HetDPT structure, as for :class:`HetDPTViT`; the semantics
            default to :data:`SWIN_SEMANTICS`.
        qk_scale: the attention's logit scale (``None``: head width
            ``**-0.5``), as mmdet's / mmseg's.
        out_after_downsample: stage outputs taken after the patch merging
            that ends the stage, as mmpretrain's.
        block_drop_rate: dropout after the attention and within the FFN
            (``None``: ``drop_rate``, as mmdet / mmseg; mmpretrain's
            registry sets 0, as its Swin drops after the embedding only).
        **stock_args: the other arguments of mmdet's / mmseg's and
            mmpretrain's ``SwinTransformer`` (``embed_dims``, ``depths``,
            ``num_heads``, ``mlp_ratio``, ``strides``, ``stage_cfgs``,
            ``patch_cfg``, ...), read by
            :func:`~hetdpt_mm.models.swin.stock_args.read_stock_args`; each
            toolbox's registry applies its defaults
            (:data:`~hetdpt_mm.models.swin.stock_args.TOOLBOX_DEFAULTS`).
        out_indices: stages whose outputs (NCHW, each through its own
            LayerNorm ``norm{i}``, so part of the weights) are returned.
        pad_small_map: maps no larger than a window are padded to whole
            shifted windows (mmdet's / mmseg's behaviour: detection and
            segmentation configs set it; the default from their
            registries); ``False`` (the official code, timm, mmpretrain)
            shrinks the window to the map, unshifted.
        token_merge, graph_propagation: refused: window attention needs
            every window whole (docs/user_guides/token_merge.md).
        frozen_stages: as mmdet's Swin: ``>= 0`` freezes the patch
            embedding, ``N`` also stages ``0 .. N-1`` and their output norms
            (from mmpretrain's registry, as its Swin: ``0 .. N``).
        with_cp: gradient checkpointing of every block in training.
        pretrained: mmseg-style shortcut for a ``Pretrained`` init_cfg.
        init_cfg: ``dict(type='Pretrained', checkpoint=..., prefix=...)``
            loads official, timm, mmpretrain, mmdet / mmseg or our Swin
            weights, converted to this form.
    """

    family = 'swin'
    codec = swin_codec
    RECORD_ARCH_KEYS = frozenset(
        {
            'arch',
            'window_size',
            'patch_size',
            'in_channels',
            'qkv_bias',
            'patch_norm',
            'out_indices',
            'qk_scale',
            'out_after_downsample',
        }
    )
    SMALL_ARGS = dict(
        arch=dict(embed_dims=32, depths=[2, 2, 2, 2], num_heads=[1, 2, 4, 8]),
        window_size=4,
    )
    DEFAULT_ARCH = 'base'
    TOOLBOX_DEFAULTS = TOOLBOX_DEFAULTS

    def __init__(
        self,
        arch: Union[str, Mapping] = 'tiny',
        in_channels: int = 3,
        patch_size: int = 4,
        window_size: int = 7,
        prune_spec=None,
        gated: bool = False,
        merged: Optional[bool] = None,
        removed_attn_output: Optional[str] = None,
        residual_gelu: Optional[str] = None,
        out_indices: Sequence[int] = (0, 1, 2, 3),
        qkv_bias: bool = True,
        patch_norm: bool = True,
        drop_rate: float = 0.0,
        attn_drop_rate: float = 0.0,
        drop_path_rate: float = 0.1,
        pad_small_map: bool = False,
        with_cp: bool = False,
        frozen_stages: int = -1,
        token_merge: Optional[Mapping] = None,
        graph_propagation: Optional[Mapping] = None,
        pretrained: Optional[str] = None,
        init_cfg: Optional[Union[dict, List[dict]]] = None,
        qk_scale: Optional[float] = None,
        out_after_downsample: bool = False,
        block_drop_rate: Optional[float] = None,
        **stock_args,
    ):
        if token_merge is not None or graph_propagation is not None:
            raise ValueError('token merging needs a ViT, not Swin windows')
        super().__init__(
            init_cfg=init_cfg_with_pretrained(pretrained, init_cfg)
        )
        stock = read_stock_args(
            arch, window_size, patch_size, in_channels, stock_args, type(self)
        )
        self.arch_settings = stock['arch']
        window_size, patch_size = stock['window_size'], stock['patch_size']
        depths = self.arch_settings['depths']
        stages = len(depths)
        if window_size < 1:
            raise ValueError(f'window_size must be >= 1, got {window_size}')
        if isinstance(out_indices, int):
            out_indices = [out_indices]
        self.out_indices = sorted(
            {i + stages if i < 0 else i for i in out_indices}
        )
        if any(not 0 <= i < stages for i in self.out_indices):
            raise ValueError(f'out_indices must be stages 0..{stages - 1}')
        check_frozen_stages(frozen_stages, stages, 'stages')
        self.window_size = window_size
        self.pad_small_map = pad_small_map
        self.out_after_downsample = out_after_downsample
        self.with_cp = with_cp
        self.frozen_stages = frozen_stages
        spec, form, semantics = self._initial_structure(
            sum(depths),
            prune_spec,
            gated,
            merged,
            SWIN_SEMANTICS,
            removed_attn_output=removed_attn_output,
            residual_gelu=residual_gelu,
        )
        self._build_args = dict(
            arch=dict(self.arch_settings),
            window_size=window_size,
            patch_size=patch_size,
            in_channels=in_channels,
            qkv_bias=qkv_bias,
            patch_norm=patch_norm,
            out_indices=list(self.out_indices),
            qk_scale=qk_scale,
            out_after_downsample=out_after_downsample,
        )

        dims = [self.arch_settings['embed_dims'] * 2**s for s in range(stages)]
        self.stage_dims = dims
        #: The width of each stage's output (mmpretrain's name).
        self.num_features = [
            dims[min(s + 1, stages - 1)] if out_after_downsample else dims[s]
            for s in range(stages)
        ]
        self.patch_embed = PatchEmbed(
            img_size=None,
            patch_size=patch_size,
            in_chans=in_channels,
            embed_dim=dims[0],
            norm_layer=nn.LayerNorm if patch_norm else None,
            dynamic_img_pad=True,  # inputs padded (bottom / right)
        )
        self.drop_after_pos = nn.Dropout(drop_rate)
        self.stages = nn.ModuleList(
            [
                SwinStage(
                    PatchMerging(dims[s], patch_norm)
                    if s < stages - 1
                    else None
                )
                for s in range(stages)
            ]
        )
        # Stochastic depth grows linearly over all blocks (as mmdet, timm).
        depth = sum(depths)
        block_drop = drop_rate if block_drop_rate is None else block_drop_rate
        self._block_args = dict(
            mlp_ratio=self.arch_settings['mlp_ratio'],
            proj_drop=block_drop,
            attn_args=dict(
                qkv_bias=qkv_bias,
                qk_scale=qk_scale,
                attn_drop=attn_drop_rate,
                proj_drop=block_drop,
                pad_small_map=pad_small_map,
            ),
            drop_path=[
                drop_path_rate * i / max(depth - 1, 1) for i in range(depth)
            ],
        )
        self._build_structure(spec, form, semantics)
        for stage in self.out_indices:
            self.add_module(
                f'norm{stage}', nn.LayerNorm(self.num_features[stage])
            )
        self._freeze(self._frozen_modules())

    # ------------------------------------------------ family: the tensors
    @classmethod
    def toolbox_args(cls, toolbox: str, args: Mapping) -> Dict:
        return toolbox_args(toolbox, args)

    # --------------------------------------------------------- structure
    def _build_structure(
        self, spec: PruneSpec, form: str, semantics: Mapping
    ) -> None:
        args = self._set_structure(spec, form, semantics)
        drop_path, attn_args = args.pop('drop_path'), args.pop('attn_args')
        depths = self.arch_settings['depths']
        positions = swin_state_dict.block_positions(depths)
        blocks = [[] for _ in depths]
        for index, (stage, block) in enumerate(positions):
            blocks[stage].append(
                build_swin_block(
                    dim=self.stage_dims[stage],
                    num_heads=self.arch_settings['num_heads'][stage],
                    attn_args=dict(
                        attn_args,
                        window_size=self.window_size,
                        shift_size=self.window_size // 2 if block % 2 else 0,
                    ),
                    drop_path=drop_path[index],
                    form=form,
                    attn_removed=spec.is_removed(ATTN, index),
                    act_removed=spec.is_removed(ACT, index),
                    **args,
                    **self.semantics,
                )
            )
        for stage, stage_blocks in zip(self.stages, blocks):
            stage.blocks = nn.ModuleList(stage_blocks)
        self._freeze(self.stages[: max(self.frozen_stages, 0)])

    def _frozen_modules(self) -> List[nn.Module]:
        if self.frozen_stages < 0:
            return []
        modules = [self.patch_embed, self.drop_after_pos]
        for stage in range(self.frozen_stages):
            modules.append(self.stages[stage])
            if stage in self.out_indices:
                modules.append(getattr(self, f'norm{stage}'))
        return modules

    def all_blocks(self) -> List[nn.Module]:
        return [block for stage in self.stages for block in stage.blocks]

    @property
    def depth(self) -> int:
        return sum(self.arch_settings['depths'])

    def get_layer_depth(
        self, param_name: str, prefix: str = ''
    ) -> Tuple[int, int]:
        """Layer depth of a parameter for layer-wise learning-rate decay
        (:func:`~.layer_decay.swin_layer_depth`)."""
        return swin_layer_depth(
            param_name, prefix, self.arch_settings['depths']
        )

    def _output_args(self) -> Dict:
        return dict(pad_small_map=self.pad_small_map)

    # -------------------------------------------------------------- weights
    def init_weights(self):
        if self._init_from_cfg():
            return
        for module in self.modules():
            if isinstance(module, nn.Linear):
                trunc_normal_(module.weight, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
            elif hasattr(module, 'relative_position_bias_table'):
                trunc_normal_(module.relative_position_bias_table, std=0.02)

    def _adapt_pretrained(self, state: Dict) -> Dict:
        resized = []
        for key, value in state.items():
            if (
                key.endswith('relative_position_bias_table')
                and value.shape[0] != (2 * self.window_size - 1) ** 2
            ):
                state[key] = (
                    swin_state_dict.resize_relative_position_bias_table(
                        value, self.window_size
                    )
                )
                resized.append(key)
        if resized:
            print_log(
                f'HetDPTSwin: {len(resized)} relative position bias '
                f'tables resampled to window {self.window_size}',
                logger='current',
            )
        return state

    def class_feature(self, inputs: torch.Tensor) -> torch.Tensor:
        """The normed last stage averaged over its positions (``N x C``):
        what mmpretrain's ``GlobalAveragePooling`` neck gives a Swin
        classifier's head."""
        last = len(self.stages) - 1
        if self.out_indices[-1] != last:
            raise ValueError(f'the class feature needs out_indices=({last}, )')
        return self(inputs)[-1].mean(dim=(2, 3))

    # -------------------------------------------------------------- forward
    def forward(self, x: torch.Tensor) -> tuple:
        self._check_weights_arrived()
        hw_shape = self.patch_embed.dynamic_feat_size(x.shape[-2:])
        x = self.patch_embed(x)
        x = self.drop_after_pos(x)
        outs = []
        for index, stage in enumerate(self.stages):
            for block in stage.blocks:
                if self.with_cp and self.training:
                    x = checkpoint(block, x, hw_shape, use_reentrant=False)
                else:
                    x = block(x, hw_shape)
            downsample = stage.downsample is not None
            if downsample and self.out_after_downsample:
                x, hw_shape = stage.downsample(x, hw_shape)
            if index in self.out_indices:
                out = getattr(self, f'norm{index}')(x)
                outs.append(
                    out.view(x.shape[0], *hw_shape, -1)
                    .permute(0, 3, 1, 2)
                    .contiguous()
                )
            if downsample and not self.out_after_downsample:
                x, hw_shape = stage.downsample(x, hw_shape)
        return tuple(outs)
