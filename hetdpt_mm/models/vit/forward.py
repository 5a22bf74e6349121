"""The forward pass of the ViT families: patch tokens with the prefix
tokens and positions (resampled to the input's grid), the blocks (with
token merging or propagation and gradient checkpointing where asked) and
the outputs of ``out_type``."""

from functools import partial
from typing import List, Tuple

import torch
from timm.layers import is_exporting, resample_abs_pos_embed
from torch.utils.checkpoint import checkpoint

from ..graph_propagation import patch_graph, propagating_block_forward
from ..layers import WHOLE_BRANCH
from ..token_merge import merging_block_forward, unmerge_tokens


class ViTForward:
    """Mixin of :class:`~hetdpt_mm.models.vit.backbone.HetDPTViT` (which
    builds the modules and settings it reads)."""

    def _pos_embed(self, grid: Tuple[int, int]) -> torch.Tensor:
        # Exported graphs always resample (an identity copy at the stored
        # grid), so that the grid stays a computed, dynamic size.
        if not is_exporting() and tuple(grid) == tuple(self.patch_grid):
            return self.pos_embed
        return resample_abs_pos_embed(
            self.pos_embed,
            list(grid),
            old_size=list(self.patch_grid),
            num_prefix_tokens=self.num_positioned_tokens,
            interpolation=self.interpolate_mode,
            antialias=self.pos_embed_antialias,
        )

    def forward(self, x: torch.Tensor, mask=None) -> tuple:
        # mmpretrain's masked-image algorithms (BEiT, MaskFeat, ...) pass
        # a mask; their backbones' configs otherwise build a ViT family.
        if mask is not None:
            raise TypeError(
                f'{type(self).__name__} takes no mask: pretrain with the '
                'stock backbone (docs/advanced/backbone.md)'
            )
        self._check_weights_arrived()
        height, width = x.shape[-2:]
        if height < self.patch_size or width < self.patch_size:
            raise ValueError(f'a {height}x{width} input is under one patch')
        x, grid = self._embed_tokens(x)
        x = self.norm_pre(x)
        merging = self._merge_schedule()
        size = source = None
        propagation = self.graph_propagation
        propagating = propagation is not None and propagation.num_prop > 0
        if propagating:
            graph = patch_graph(
                x[:, self.num_prefix_tokens :], grid, propagation
            )
            scales = (
                x.new_ones(x.shape[:2]) if propagation.token_scale else None
            )
        outs = [self._format_output(x, grid)] if self.out_origin else []
        last = len(self.blocks) - 1
        for index, block in enumerate(self.blocks):
            if merging:
                run = partial(
                    merging_block_forward,
                    block,
                    r=merging[index],
                    num_prefix=self.num_prefix_tokens,
                    removed_attn=self.token_merge.removed_attn,
                    prop_attn=self.token_merge.prop_attn,
                    whole_branch=(
                        self.semantics['removed_attn_output'] == WHOLE_BRANCH
                    ),
                )
                args = (x, size, source)
            elif propagating:
                run = partial(
                    propagating_block_forward,
                    block,
                    num_prefix=self.num_prefix_tokens,
                    options=propagation,
                )
                args = (x, graph, scales, source)
            else:
                run, args = block, (x,)
            if self.with_cp and self.training:
                result = checkpoint(run, *args, use_reentrant=False)
            else:
                result = run(*args)
            if merging:
                x, size, source = result
            elif propagating:
                x, graph, scales, source = result
            else:
                x = result
            if index == last:
                x = self.norm(x)
            if index in self.out_indices:
                # Class tokens are never merged or propagated; maps need
                # every position.
                tokens = (
                    x
                    if self.out_type == 'cls_token'
                    else unmerge_tokens(x, source)
                )
                outs.append(self._format_output(tokens, grid))
        return tuple(outs)

    def _merge_schedule(self) -> List[int]:
        """Tokens merged per block; empty when nothing is merged (the
        blocks then run as they are, so ``r=0`` is no merging at all)."""
        if self.token_merge is None:
            return []
        schedule = self.token_merge.per_block(len(self.blocks))
        return schedule if any(schedule) else []

    def _prefix_tokens(self):
        """The tokens before the patches, in order (``None``: absent)."""
        return (self.cls_token, self.dist_token)

    def _embed_tokens(self, x: torch.Tensor):
        """Patch tokens with the prefix tokens and positions added, and
        the patch grid.  As timm: without positioned prefix tokens
        (``no_embed_class``) the positions are added to the patches before
        the prefix tokens are prepended."""
        x = self.patch_embed(x)
        grid = x.shape[1:3]
        x = x.flatten(1, 2)
        prefix = [
            token.expand(x.shape[0], -1, -1)
            for token in self._prefix_tokens()
            if token is not None
        ]
        positioned = self.num_positioned_tokens > 0
        if not positioned:
            x = x + self._pos_embed(grid)
        if prefix:
            x = torch.cat(prefix + [x], dim=1)
        if positioned:
            x = x + self._pos_embed(grid)
        return self.pos_drop(x), grid

    def _format_output(self, x: torch.Tensor, grid):
        if self.out_type == 'raw':
            return x
        if self.out_type == 'cls_token':
            return (x[:, 0], x[:, 1]) if self.distilled else x[:, 0]
        patches = x[:, self.num_prefix_tokens :]
        if self.out_type == 'avg_featmap':
            return self.fc_norm(patches.mean(dim=1))
        featmap = patches.reshape(x.shape[0], *grid, -1).permute(0, 3, 1, 2)
        if self.output_cls_token:
            return featmap, x[:, 0]
        return featmap
