"""HetDPTViT: a DeiT/ViT backbone whose attention sublayers and FFN GELUs can
be removed (HetDPT), for mmpretrain, mmdet and mmseg.  Its codec is
:mod:`.codec`, its forward pass :mod:`.forward`."""

from functools import partial
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmengine.logging import print_log
from timm.layers import PatchEmbed, trunc_normal_
from timm.models.vision_transformer import init_weights_vit_timm

from ...spec import ACT, ATTN, FFN, PruneSpec
from ..backbone_args import check_frozen_stages, init_cfg_with_pretrained
from ..family import HetDPTBackbone
from ..graph_propagation import GraphPropagation
from ..layer_decay import vit_layer_depth
from ..layers import build_block
from ..token_merge import TokenMerge
from . import codec as vit_codec
from . import state_dict as vit_state_dict
from . import stock_args as stock_vit
from .codec import RELEASED_SEMANTICS, resolve_arch
from .forward import ViTForward

#: The classes whose note on mmseg's norm names this process has logged.
_NORM_NAMES_NOTED = set()


class HetDPTViT(ViTForward, HetDPTBackbone):
    """DeiT/ViT with removable attention sublayers and FFN GELUs (HetDPT).

    Args:
        arch: ``'deit-tiny'``, ``'deit-small'``, ``'deit-base'`` or a dict
            with ``embed_dims``, ``num_layers``, ``num_heads``, ``mlp_ratio``.
        img_size: size the position embedding is stored at; other input
            sizes (non-square, not multiples of the patch size) work through
            on-the-fly interpolation and padding.
        prune_spec: a :class:`PruneSpec`, a dict, or ``None`` to take it from
            the checkpoint named in ``init_cfg`` (dense when there is none).
        gated: build the search form (straight-through gates, docs/method.md
        §3);
            gates of the spec's removed layers start closed.
        merged: merge activation-free FFNs into one linear each; ``None``
            follows the checkpoint in ``init_cfg`` (``False`` without one).
        removed_attn_output: ``'norm'`` (released models: ``x + LN1(x)``),
            ``'zero'`` or ``'identity'`` (whole-branch removal: removed
            attention and FFN branches go with their LayerNorm and leave
            ``x``; the spec's ``ffn_removed`` needs it;
            docs/user_guides/dinov2.md); ``None`` follows the checkpoint, else
            ``'norm'``.
        residual_gelu: when a GELU is applied to the residual stream after a
            block: ``'both_removed'`` (released models), ``'act_removed'``
            (the authors' search), ``'never'``; ``None`` follows the
            checkpoint, else ``'both_removed'``.
        distilled: add DeiT's distillation token.
        out_type: ``'cls_token'`` (mmpretrain heads; ``(cls, dist)`` when
            distilled), ``'featmap'`` (NCHW maps for mmdet / mmseg),
            ``'avg_featmap'`` (normed by ``fc_norm``, mmpretrain's ``ln2``)
            or ``'raw'`` tokens.
        out_indices: blocks whose outputs are returned.
        final_norm: apply the final LayerNorm to the last block's output.
        pre_norm: a LayerNorm before the blocks (CLIP-style ViTs; mmseg's
            ``ln_pre``, mmpretrain's ``pre_norm``, timm's ``norm_pre``).
        patch_norm: a LayerNorm on the patch embedding's tokens (mmseg's).
        patch_bias: a bias in the patch embedding (DeiT's; mmseg's registry
            defaults to ``False``, as its ViT).
        output_cls_token: with ``'featmap'``, return ``(featmap, cls_token)``
            per level, like mmseg's ViT.
        with_cp: gradient checkpointing of every block in training
            (activations recomputed in the backward pass, not kept).
        token_merge: ToMe in every block, ``dict(r=8, ...)``
            (docs/user_guides/token_merge.md); ``None``: none.
        graph_propagation: GTP-ViT in every block,
            ``dict(num_prop=8, ...)``, instead of ToMe; featmap outputs
            are unmerged (docs/user_guides/token_merge.md).
        frozen_stages: as mmpretrain's / mmseg's ViT: ``0`` or ``-1`` trains
            everything; ``N > 0`` freezes the patch embedding, position
            embedding and class / distillation tokens and blocks
            ``0 .. N-1`` (and the final norm when ``N`` is the depth: a
            linear probe), which ``train()`` keeps in eval mode.
        norm_eval: LayerNorms in eval mode in training (as mmseg's ViT).
        pretrained: mmseg-style shortcut for a ``Pretrained`` init_cfg.
        init_cfg: ``dict(type='Pretrained', checkpoint=..., prefix=...)``
            loads DeiT/timm, authors', our own or OpenMMLab checkpoints.
        **stock_args: mmseg's / mmpretrain's ``VisionTransformer``
            arguments, with their meaning (:mod:`.stock_args`).
    """

    family = 'vit'
    codec = vit_codec
    RECORD_ARCH_KEYS = frozenset(
        {
            'arch',
            'img_size',
            'patch_size',
            'in_channels',
            'distilled',
            'with_cls_token',
            'qkv_bias',
            'final_norm',
            'norm_cfg',
            'out_type',
            'pre_norm',
            'patch_norm',
            'patch_bias',
        }
    )
    SMALL_ARGS = dict(
        arch=dict(embed_dims=96, num_layers=6, num_heads=3),
        img_size=32,
        patch_size=4,
    )
    DEFAULT_ARCH = 'deit-base'
    WIDTH_PRUNABLE = True
    REMOVABLE_KINDS = (ATTN, ACT, FFN)
    MERGES_TOKENS = True
    TOOLBOX_DEFAULTS = stock_vit.TOOLBOX_DEFAULTS
    #: Antialiased position-embedding resampling (DeiT's loads without).
    pos_embed_antialias = False

    def __init__(
        self,
        arch: Union[str, Mapping] = 'deit-base',
        img_size: Union[int, Sequence[int]] = 224,
        patch_size: int = 16,
        in_channels: int = 3,
        prune_spec=None,
        gated: bool = False,
        merged: Optional[bool] = None,
        removed_attn_output: Optional[str] = None,
        residual_gelu: Optional[str] = None,
        distilled: bool = False,
        with_cls_token: bool = True,
        out_type: str = 'cls_token',
        out_indices: Union[int, Sequence[int]] = -1,
        final_norm: bool = True,
        pre_norm: bool = False,
        patch_norm: bool = False,
        patch_bias: bool = True,
        output_cls_token: bool = False,
        token_merge: Optional[Mapping] = None,
        graph_propagation: Optional[Mapping] = None,
        qkv_bias: bool = True,
        drop_rate: float = 0.0,
        attn_drop_rate: float = 0.0,
        drop_path_rate: float = 0.0,
        interpolate_mode: str = 'bicubic',
        with_cp: bool = False,
        frozen_stages: int = -1,
        norm_eval: bool = False,
        pretrained: Optional[str] = None,
        init_cfg: Optional[Union[dict, List[dict]]] = None,
        **stock_args,
    ):
        arch, stock = stock_vit.take_stock_args(
            arch, self.DEFAULT_ARCH, stock_args, type(self)
        )
        super().__init__(
            init_cfg=init_cfg_with_pretrained(pretrained, init_cfg)
        )
        self.arch_settings = resolve_arch(arch)
        depth = self.arch_settings['num_layers']
        dim = self.arch_settings['embed_dims']
        stock_vit.check_output_args(
            out_type, with_cls_token, output_cls_token, distilled
        )
        check_frozen_stages(frozen_stages, depth, 'blocks')
        self.with_cp = with_cp
        self.norm_eps = stock_vit.norm_eps(stock.get('norm_cfg'))
        self.frozen_exclude = stock.get('frozen_exclude')
        self.out_origin = stock.get('out_origin', False)
        self.frozen_stages = max(frozen_stages, 0)
        self.norm_eval = norm_eval

        spec, form, semantics = self._initial_structure(
            depth,
            prune_spec,
            gated,
            merged,
            RELEASED_SEMANTICS,
            removed_attn_output=removed_attn_output,
            residual_gelu=residual_gelu,
        )

        self.img_size = (
            tuple(img_size)
            if isinstance(img_size, Sequence)
            else (img_size, img_size)
        )
        self.patch_size = patch_size
        self.distilled = distilled
        self.with_cls_token = with_cls_token
        self.out_type = out_type
        self.final_norm = final_norm
        self.pre_norm = pre_norm
        self.patch_norm = patch_norm
        self.patch_bias = patch_bias
        self.output_cls_token = output_cls_token
        self.interpolate_mode = interpolate_mode
        self.token_merge = TokenMerge.coerce(token_merge)
        if self.token_merge is not None:
            self.token_merge.per_block(depth)  # a list r names every block
        self.graph_propagation = GraphPropagation.coerce(graph_propagation)
        if self.graph_propagation is not None and self.token_merge is not None:
            raise ValueError('give graph_propagation or token_merge, not both')
        self._build_args = dict(
            arch=dict(self.arch_settings),
            img_size=self.img_size,
            patch_size=patch_size,
            in_channels=in_channels,
            distilled=distilled,
            with_cls_token=with_cls_token,
            qkv_bias=qkv_bias,
            final_norm=final_norm,
        )
        self._build_args.update(
            stock_vit.structural_args(
                self.norm_eps, out_type, pre_norm, patch_norm, patch_bias
            )
        )

        self.num_prefix_tokens = int(with_cls_token) + int(distilled)
        self.embed_dims = None
        self._build_embedding(spec.widths.embed_dims if spec.widths else dim)
        if self.graph_propagation is not None:
            self.graph_propagation.check_patches(
                self.patch_grid[0] * self.patch_grid[1]
            )
        self.pos_drop = nn.Dropout(drop_rate)

        # Stochastic depth grows linearly with the block index (as timm).
        self._block_args = dict(
            dim=dim,
            num_heads=self.arch_settings['num_heads'],
            mlp_ratio=self.arch_settings['mlp_ratio'],
            qkv_bias=qkv_bias,
            drop_rate=drop_rate,
            attn_drop_rate=attn_drop_rate,
            drop_path=[
                drop_path_rate * i / max(depth - 1, 1) for i in range(depth)
            ],
        )
        self._build_structure(spec, form, semantics)
        self.norm = (
            nn.LayerNorm(self.embed_dims, eps=self.norm_eps)
            if final_norm
            else nn.Identity()
        )

        self.out_indices = stock_vit.block_indices(out_indices, depth)
        self._freeze(self._frozen_modules())
        stock_vit.frozen_by_exclude(self, self.frozen_exclude)

    @classmethod
    def toolbox_args(cls, toolbox: str, args: Mapping) -> Dict:
        # Once per process: a test or an inference builds the model again.
        if toolbox == 'mmseg' and cls not in _NORM_NAMES_NOTED:
            _NORM_NAMES_NOTED.add(cls)
            print_log(
                stock_vit.MMSEG_NORM_NAMES.format(cls.__name__),
                logger='current',
            )
        return super().toolbox_args(toolbox, args)

    @classmethod
    def sized_args(cls, img_size) -> Dict:
        return dict(img_size=img_size)  # the position embedding's size

    # --------------------------------------------------------- structure
    def _build_embedding(self, dim: int) -> None:
        """(Re)build everything of embedding width ``dim`` outside the
        blocks: patch embedding, tokens, position embedding and, once built,
        the final norm (width pruning changes it; the modules keep their
        places in the state dict)."""
        self.embed_dims = dim
        norm_layer = partial(nn.LayerNorm, eps=self.norm_eps)
        # Padding makes any input size work; the grid follows the input.
        self.patch_embed = PatchEmbed(
            img_size=self.img_size,
            patch_size=self.patch_size,
            in_chans=self._build_args['in_channels'],
            embed_dim=dim,
            norm_layer=norm_layer if self.patch_norm else None,
            bias=self.patch_bias,
            output_fmt='NHWC',
            strict_img_size=False,
            dynamic_img_pad=True,
        )
        self.norm_pre = norm_layer(dim) if self.pre_norm else nn.Identity()
        self.patch_grid = self.patch_embed.grid_size
        self.cls_token = (
            nn.Parameter(torch.zeros(1, 1, dim))
            if self.with_cls_token
            else None
        )
        self.dist_token = (
            nn.Parameter(torch.zeros(1, 1, dim)) if self.distilled else None
        )
        num_patches = self.patch_grid[0] * self.patch_grid[1]
        self.pos_embed = nn.Parameter(
            torch.zeros(1, self.num_prefix_tokens + num_patches, dim)
        )
        if isinstance(getattr(self, 'norm', None), nn.LayerNorm):
            self.norm = nn.LayerNorm(dim, eps=self.norm_eps)
        # The norm of the averaged patch tokens (mmpretrain's ln2).
        self.fc_norm = (
            nn.LayerNorm(dim, eps=self.norm_eps)
            if self.out_type == 'avg_featmap'
            else None
        )
        if self.frozen_stages:
            self._freeze([self.patch_embed, self.norm_pre])
            for param in (self.pos_embed, self.cls_token, self.dist_token):
                if param is not None:
                    param.requires_grad_(False)

    def _build_structure(
        self, spec: PruneSpec, form: str, semantics: Mapping
    ) -> None:
        args = self._set_structure(spec, form, semantics)
        drop_path = args.pop('drop_path')
        widths = spec.widths
        if widths is not None:
            widths.check_pruned_from(
                args['dim'],
                args['num_heads'],
                int(args['dim'] * args['mlp_ratio']),
            )
            args['dim'] = widths.embed_dims
        if args['dim'] != self.embed_dims:
            self._build_embedding(args['dim'])
        self.blocks = nn.ModuleList(
            [
                build_block(
                    drop_path=drop_path[i],
                    form=form,
                    attn_removed=spec.is_removed(ATTN, i),
                    act_removed=spec.is_removed(ACT, i),
                    ffn_removed=spec.is_removed(FFN, i),
                    norm_layer=partial(nn.LayerNorm, eps=self.norm_eps),
                    widths=widths.block(i) if widths else None,
                    **args,
                    **self._family_block_args(),
                    **self.semantics,
                )
                for i in range(spec.depth)
            ]
        )
        self._freeze(self.blocks[: self.frozen_stages])  # also on rebuilds
        stock_vit.frozen_by_exclude(self, self.frozen_exclude)

    def _family_block_args(self) -> Dict:
        """Arguments of :func:`~.layers.build_block` a family adds."""
        return {}

    # ------------------------------------------------------ fine-tuning
    def _frozen_modules(self) -> List[nn.Module]:
        modules = list(self.blocks[: self.frozen_stages])
        if self.frozen_stages:
            modules += [self.patch_embed, self.norm_pre, self.pos_drop]
            if self.frozen_stages == len(self.blocks):
                modules += [self.norm, self.fc_norm or nn.Identity()]
        return modules

    def train(self, mode: bool = True):
        super().train(mode)
        if mode and self.norm_eval:
            for module in self.modules():
                if isinstance(module, nn.LayerNorm):
                    module.eval()
        return self

    def get_layer_depth(
        self, param_name: str, prefix: str = ''
    ) -> Tuple[int, int]:
        """Layer depth of a parameter for layer-wise learning-rate decay
        (:func:`~.layer_decay.vit_layer_depth`)."""
        return vit_layer_depth(param_name, prefix, len(self.blocks))

    @property
    def depth(self) -> int:
        return len(self.blocks)

    def all_blocks(self) -> List[nn.Module]:
        return list(self.blocks)

    def _output_args(self) -> Dict:
        out_type = (
            {}
            if 'out_type' in self._build_args
            else dict(out_type=self.out_type)
        )  # then structural, in build_args()
        return dict(
            **out_type,
            out_indices=self.out_indices,
            output_cls_token=self.output_cls_token,
            interpolate_mode=self.interpolate_mode,
            token_merge=self.token_merge,
            graph_propagation=self.graph_propagation,
        )

    # -------------------------------------------------------------- weights
    def init_weights(self):
        if self._init_from_cfg():
            return
        trunc_normal_(self.pos_embed, std=0.02)
        for token in (self.cls_token, self.dist_token):
            if token is not None:
                nn.init.normal_(token, std=1e-6)
        for block in self.blocks:
            block.apply(init_weights_vit_timm)

    def _adapt_pretrained(self, state: Dict) -> Dict:
        src_prefix = sum(k in state for k in ('cls_token', 'dist_token'))
        if 'dist_token' in state and self.dist_token is None:
            # Loads, but not the network the file was trained as.
            state.pop('dist_token')
            print_log(
                'HetDPTViT: the checkpoint is distilled (it has a '
                'distillation token) and this backbone is not '
                '(distilled=False): the token and its position '
                'embedding are dropped',
                logger='current',
                level=30,
            )
        bias = state.get('patch_embed.proj.bias')
        if not self.patch_bias and bias is not None:
            state.pop('patch_embed.proj.bias')
            if bias.any():  # mmseg's ViT drops it as well
                print_log(
                    'HetDPTViT: the checkpoint has a patch-embedding bias '
                    "and this backbone none (patch_bias=False, mmseg's "
                    'default): the bias is dropped; patch_bias=True keeps it',
                    logger='current',
                    level=30,
                )
        if 'pos_embed' in state:
            state['pos_embed'] = vit_state_dict.resize_pos_embed(
                state['pos_embed'],
                src_prefix,
                self.num_prefix_tokens,
                self.patch_grid,
                self.interpolate_mode,
            )
        return state

    @property
    def num_positioned_tokens(self) -> int:
        """Prefix tokens with a position in ``pos_embed``."""
        return self.num_prefix_tokens


def refuse_a_deit_head_without_its_token(module, name, submodule) -> None:
    """mmpretrain's distilled DeiT config swapped to ``type='HetDPTViT'``
    (``DistilledVisionTransformer`` says ``distilled`` by its type): its
    ``DeiTClsHead`` takes the class and distillation tokens, so the
    classifier is refused as it is built, not at its first forward."""
    if name != 'head' or type(submodule).__name__ != 'DeiTClsHead':
        return
    # Not getattr: this runs for every module registered anywhere, and a
    # wrapper's __getattr__ (FSDP's) recurses before its module is set.
    backbone = module.__dict__.get('_modules', {}).get('backbone')
    if (
        isinstance(backbone, HetDPTViT)
        and backbone.out_type == 'cls_token'
        and not backbone.distilled
    ):
        raise ValueError(
            'DeiTClsHead takes the class and distillation tokens of a '
            'distilled DeiT: build the backbone with distilled=True (what '
            "mmpretrain's DistilledVisionTransformer implies)"
        )


nn.modules.module.register_module_module_registration_hook(
    refuse_a_deit_head_without_its_token
)
