"""Graph-based token propagation (GTP-ViT, Xu et al., WACV 2024) inside
the HetDPT ViTs' blocks: a second token-reduction option beside token
merging; docs/user_guides/token_merge.md says what is computed.

A patch graph (8-neighbour spatial, kNN on the embedded tokens, or both),
symmetrically normalised, is built once before the blocks.  Between a
block's attention and its FFN, the ``num_prop`` patch tokens of lowest rank
(the max over heads of the attention diagonal times the max over heads of
the attention received) are removed and added, weighted by the graph and
``alpha``, into their kept neighbours; token scales follow the same way and
enter attention as ``log(scale)``.  As Ackesnal/GTP-ViT's ``MixedAttnMax``
selection and ``GraphProp`` propagation.  Every input token remembers the
token that stands for it, so featmap outputs are unmerged onto the full
grid as with token merging.
"""

import math
from dataclasses import dataclass
from typing import Optional, Tuple

import torch
import torch.nn as nn
from timm.layers import Attention

from .gates import GatedResidualBranch
from .token_merge import (
    attention_inputs,
    attention_output,
    attention_removed,
    check_fields,
    option_keys,
)

#: The patch graphs: ``'spatial'`` (the 8 grid neighbours),
#: ``'semantic'`` (the ``num_neighbours`` most cosine-similar embedded
#: tokens) or ``'mixed'`` (either).
GRAPHS = ('spatial', 'semantic', 'mixed')


@dataclass(frozen=True)
class GraphPropagation:
    """The ``graph_propagation`` option of a backbone
    (``dict(num_prop=8, ...)``); defaults as the reference's command line
    but for ``graph`` and ``token_scale``, its paper's DeiT setting."""

    num_prop: int
    alpha: float = 0.1
    sparsity: float = 1.0
    graph: str = 'mixed'
    num_neighbours: int = 8
    token_scale: bool = True

    def __post_init__(self):
        valid = dict(
            num_prop=type(self.num_prop) is int and self.num_prop >= 0,
            # a semantic graph without neighbours has no edges
            num_neighbours=type(self.num_neighbours) is int
            and self.num_neighbours >= (self.graph == 'semantic'),
            alpha=type(self.alpha) in (int, float)
            and math.isfinite(self.alpha),
            sparsity=type(self.sparsity) in (int, float)
            and 0 < self.sparsity <= 1,
            graph=self.graph in GRAPHS,
            token_scale=isinstance(self.token_scale, bool),
        )
        check_fields('graph_propagation', self, valid)

    def check_patches(self, patches: int) -> None:
        """Whether images of ``patches`` patches have ``num_neighbours``
        neighbours for each (a semantic or mixed graph)."""
        if self.graph != 'spatial' and self.num_neighbours >= patches:
            raise ValueError(
                f'graph_propagation: lower num_neighbours below {patches}'
            )

    @classmethod
    def coerce(cls, value) -> Optional['GraphPropagation']:
        """A ``GraphPropagation`` from a config value (``None``: none)."""
        if value is None or isinstance(value, cls):
            return value
        keys = set(cls.__dataclass_fields__)
        return cls(**option_keys('graph_propagation', value, keys, 'num_prop'))


def patch_graph(
    patches: torch.Tensor, grid: Tuple[int, int], options: GraphPropagation
) -> torch.Tensor:
    """The symmetrically normalised patch graph (``B, P, P``) of the
    embedded patch tokens ``patches`` (``B, P, C``) on ``grid``."""
    batch, count, _ = patches.shape
    eye = torch.eye(count, device=patches.device)
    if options.graph != 'semantic':
        rows = torch.arange(count, device=patches.device) // grid[1]
        cols = torch.arange(count, device=patches.device) % grid[1]
        near_rows = (rows[:, None] - rows[None, :]).abs() <= 1
        near_cols = (cols[:, None] - cols[None, :]).abs() <= 1
        spatial = (near_rows & near_cols).float() - eye
        graph = spatial.expand(batch, -1, -1)
    if options.graph != 'spatial':
        normed = patches / patches.norm(dim=-1, keepdim=True)
        similarity = normed @ normed.transpose(-1, -2)
        # The (num_neighbours + 1)-th largest, the token itself included;
        # topk, not kthvalue: ONNX has TopK.
        nearest = similarity.topk(options.num_neighbours + 1, dim=-1).values
        threshold = nearest[..., -1:]
        semantic = (similarity >= threshold).float() - eye
        graph = (
            semantic
            if options.graph == 'semantic'
            else torch.bitwise_or(semantic.int(), graph.int()).float()
        )
    scale = graph.sum(-1) ** -0.5
    return scale[..., :, None] * graph * scale[..., None, :]


def attention_with_map(
    attn: Attention,
    x: torch.Tensor,
    scales: Optional[torch.Tensor],
    sparsity: float,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """timm's ``Attention.forward`` (unfused) with ``log(scales)`` added to
    the logits and the weights below the ``1 - sparsity`` quantile of each
    head zeroed, also returning the attention map (``B, H, N, N``)."""
    tokens = x.shape[1]
    query, key, value = attention_inputs(attn, x)
    scores = (query * attn.scale) @ key.transpose(-2, -1)
    if scales is not None:
        scores = scores + scales.log()[:, None, None, :]
    weights = attn.attn_drop(scores.softmax(dim=-1))
    dropped = int(tokens * tokens * (1 - sparsity))
    if dropped > 0:
        threshold = weights.flatten(2).topk(dropped, largest=False).values
        weights = weights * (weights >= threshold[..., -1:, None])
    return attention_output(attn, x, weights @ value), weights


def propagate_tokens(
    x: torch.Tensor,
    graph: torch.Tensor,
    scales: Optional[torch.Tensor],
    weights: torch.Tensor,
    num_prop: int,
    num_prefix: int,
    alpha: float,
) -> Tuple[torch.Tensor, ...]:
    """Remove the ``num_prop`` patch tokens of lowest rank from ``x`` and
    add them, through ``graph``, into the kept ones; the kept patches
    follow in order of rank, after the prefix tokens.  Also returns, for
    every input token, its index in the output: a removed patch points at
    the kept patch that received the largest share of it (ties, and a
    patch with no kept neighbour: the one of highest rank)."""
    diagonal = weights.diagonal(dim1=-2, dim2=-1)[..., num_prefix:]
    received = weights[..., num_prefix:].sum(-2)
    rank = diagonal.max(1).values * received.max(1).values
    order = rank.argsort(dim=1, descending=True)
    kept, removed = order[:, :-num_prop], order[:, -num_prop:]

    # Flat index_select and one gather: the same values as per-batch
    # gathers with expanded indices, which are several times slower on CPU.
    batch = x.shape[0]
    first = torch.arange(batch, device=x.device)[:, None]

    def rows(values, index, offset=0):
        flat = (index + offset + first * values.shape[1]).flatten()
        taken = values.flatten(0, 1).index_select(0, flat)
        return taken.view(*index.shape, *values.shape[2:])

    count = graph.shape[-1]
    # The kept rows with their columns in order (kept ones, then removed).
    reordered = graph.flatten(1).gather(
        1, (kept[:, :, None] * count + order[:, None, :]).flatten(1)
    )
    reordered = reordered.view(batch, kept.shape[1], count)
    graph, to_kept = reordered.split([kept.shape[1], num_prop], dim=2)

    def propagated(values):
        # values: every token, prefix first (B, N, C)
        return rows(values, kept, num_prefix) + alpha * (
            to_kept @ rows(values, removed, num_prefix)
        )

    x = torch.cat([x[:, :num_prefix], propagated(x)], dim=1)
    if scales is not None:
        patch_scales = propagated(scales[..., None])[..., 0]
        scales = torch.cat([scales[:, :num_prefix], patch_scales], 1)
    destination = torch.empty_like(order)
    kept_index = torch.arange(kept.shape[1], device=x.device)
    destination.scatter_(1, kept, kept_index.expand(batch, -1))
    destination.scatter_(1, removed, to_kept.argmax(dim=1))
    prefix = torch.arange(num_prefix, device=x.device)
    destination = torch.cat(
        [prefix.expand(batch, -1), destination + num_prefix], dim=1
    )
    return x, graph, scales, destination


def propagating_block_forward(
    block: nn.Module,
    x: torch.Tensor,
    graph: torch.Tensor,
    scales: Optional[torch.Tensor],
    source: Optional[torch.Tensor],
    num_prefix: int,
    options: GraphPropagation,
) -> Tuple[torch.Tensor, ...]:
    """One HetDPT block (timm ``Block`` layout, any form) with
    ``options.num_prop`` tokens propagated between its attention and its
    FFN, carrying for every input token the index of the token that stands
    for it (``source``: ``None`` before any propagation); blocks whose
    attention was removed have no attention map to rank by and propagate
    nothing.  A pure function of its tensors, so that it can be
    checkpointed."""
    attn = block.attn
    normed = block.norm1(x)
    if attention_removed(attn):
        out, weights = attn(normed), None
    else:
        out, weights = attention_with_map(
            attn, normed, scales, options.sparsity
        )
        if isinstance(attn, GatedResidualBranch):
            out = attn.blend(out, normed)
    x = x + block.drop_path1(block.ls1(out))
    num_prop = min(options.num_prop, x.shape[1] - num_prefix - 1)
    if weights is not None and num_prop > 0:
        x, graph, scales, destination = propagate_tokens(
            x, graph, scales, weights, num_prop, num_prefix, options.alpha
        )
        source = (
            destination if source is None else destination.gather(1, source)
        )
    x = x + block.drop_path2(block.ls2(block.mlp(block.norm2(x))))
    return block.residual_activation(x), graph, scales, source
