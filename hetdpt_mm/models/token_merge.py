"""Token merging (ToMe, Bolya et al., ICLR 2023) inside the HetDPT ViTs'
blocks, in every form; docs/user_guides/token_merge.md says what is merged,
where and why.

Between a block's attention and its FFN, ``r`` patch tokens are merged into
their most similar partners by bipartite soft matching on the attention
keys (averaged over heads); merged tokens are size-weighted averages and
attention adds ``log(size)`` to its logits (proportional attention).
Prefix tokens (class, distillation, register) are never merged. A
``source`` index remembers where every input patch went, so featmap
outputs are unmerged onto the full grid (as ToMe for Stable Diffusion
does) and dense-prediction heads see every position.
"""

from dataclasses import dataclass
from typing import List, Optional, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.layers import Attention

from .gates import GatedResidualBranch
from .layers import AttentionBypass

#: What a block whose attention was removed merges on: ``'norm'`` (its
#: LN1-normalised tokens, the features its residual branch carries) or
#: ``'none'`` (such blocks merge nothing).
REMOVED_ATTN_METRICS = ('norm', 'none')
#: ``'constant'``: ``r`` in every block; ``'decreasing'``: linear from
#: ``2r`` in the first block to 0 in the last (the same total, earlier).
SCHEDULES = ('constant', 'decreasing')
#: More tokens per block than any image has (a schedule of a larger ``r``
#: would not fit a float).
MAX_R = 2**31 - 1


@dataclass(frozen=True)
class TokenMerge:
    """The ``token_merge`` option of a backbone (``dict(r=..., ...)``).

    ``r`` is a number of tokens per block (scheduled by ``schedule``) or a
    list with one entry per block.
    """

    r: Union[int, Tuple[int, ...]]
    schedule: str = 'constant'
    removed_attn: str = 'norm'

    def __post_init__(self):
        values = self.r if isinstance(self.r, tuple) else (self.r,)
        if any(
            isinstance(v, bool)
            or not isinstance(v, int)
            or not 0 <= v <= MAX_R
            for v in values
        ):
            raise ValueError(
                'token_merge r must be a non-negative integer '
                f'(at most {MAX_R}) '
                f'or a list of them, got {self.r!r:.80}'
            )
        if self.schedule not in SCHEDULES:
            raise ValueError(
                f'token_merge schedule must be one of '
                f'{SCHEDULES}, got {self.schedule!r}'
            )
        if isinstance(self.r, tuple) and self.schedule != 'constant':
            raise ValueError(
                'token_merge takes a list r or a schedule, not both'
            )
        if self.removed_attn not in REMOVED_ATTN_METRICS:
            raise ValueError(
                f'token_merge removed_attn must be one of '
                f'{REMOVED_ATTN_METRICS}, got '
                f'{self.removed_attn!r}'
            )

    @classmethod
    def coerce(cls, value) -> Optional['TokenMerge']:
        """A ``TokenMerge`` from a config value (``None``: no merging)."""
        if value is None or isinstance(value, cls):
            return value
        if not isinstance(value, dict):
            raise ValueError(
                'token_merge must be a dict like dict(r=8) or '
                f'None, got {value!r}'
            )
        unknown = set(value) - {'r', 'schedule', 'removed_attn'}
        if unknown:
            raise ValueError(
                f'unknown token_merge key(s) {sorted(unknown)};'
                ' it takes r, schedule, removed_attn'
            )
        if 'r' not in value:
            raise ValueError(
                'token_merge needs r, the tokens merged per block'
            )
        r = value['r']
        if isinstance(r, (list, tuple)):
            r = tuple(r)
        return cls(**dict(value, r=r))

    def per_block(self, depth: int) -> List[int]:
        """Tokens merged in each of ``depth`` blocks (before the cap by the
        tokens there are)."""
        if isinstance(self.r, tuple):
            if len(self.r) != depth:
                raise ValueError(
                    f'token_merge r lists {len(self.r)} '
                    f'blocks, the network has {depth}'
                )
            return list(self.r)
        if self.schedule == 'constant' or depth == 1:
            return [self.r] * depth
        step = 2 * self.r / (depth - 1)
        return [round(2 * self.r - step * i) for i in range(depth)]

    def to_dict(self) -> dict:
        r = list(self.r) if isinstance(self.r, tuple) else self.r
        return dict(
            r=r, schedule=self.schedule, removed_attn=self.removed_attn
        )


def attention_removed(attn: nn.Module) -> bool:
    """Whether a block's attention sublayer is removed (pruned / merged
    forms) or gated shut (gated form)."""
    if isinstance(attn, AttentionBypass):
        return True
    return isinstance(attn, GatedResidualBranch) and not attn.is_open


def sized_attention(
    attn: Attention, x: torch.Tensor, size: Optional[torch.Tensor]
) -> Tuple[torch.Tensor, torch.Tensor]:
    """timm's ``Attention.forward`` with ``log(size)`` added to the logits
    (``size=None``: all tokens of size 1, no bias), also returning the keys
    averaged over heads, the matching metric."""
    batch, tokens, _ = x.shape
    qkv = (
        attn.qkv(x)
        .reshape(batch, tokens, 3, attn.num_heads, attn.head_dim)
        .permute(2, 0, 3, 1, 4)
    )
    query, key, value = qkv.unbind(0)
    query, key = attn.q_norm(query), attn.k_norm(key)
    bias = None if size is None else size.log()[:, None, None, :, 0]
    if attn.fused_attn:
        out = F.scaled_dot_product_attention(
            query,
            key,
            value,
            attn_mask=bias,
            dropout_p=attn.attn_drop.p if attn.training else 0.0,
        )
    else:
        scores = (query * attn.scale) @ key.transpose(-2, -1)
        if bias is not None:
            scores = scores + bias
        out = attn.attn_drop(scores.softmax(dim=-1)) @ value
    out = attn.norm(out.transpose(1, 2).reshape(batch, tokens, attn.attn_dim))
    if attn.gate is not None:
        out = out * attn.gate(x).sigmoid()
    return attn.proj_drop(attn.proj(out)), key.mean(dim=1)


def bipartite_merge(
    x: torch.Tensor,
    size: torch.Tensor,
    metric: torch.Tensor,
    r: int,
    num_prefix: int,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Merge ``r`` patch tokens of ``x`` (``B, N, C``) by bipartite soft
    matching on ``metric`` (``B, N, D``); tokens after the ``num_prefix``
    prefix tokens alternate between sets A (even) and B (odd), and each of
    the ``r`` A tokens most similar (cosine) to some B token is averaged
    into it, weighted by ``size`` (``B, N, 1``).

    Returns the merged tokens ``[prefix, kept A in order, B]``, their sizes
    and, for each input token, its index in the output.
    """
    batch, tokens, channels = x.shape
    patches = tokens - num_prefix
    metric = metric[:, num_prefix:]
    metric = metric / metric.norm(dim=-1, keepdim=True)
    scores = metric[:, 0::2] @ metric[:, 1::2].transpose(1, 2)
    best_score, best_partner = scores.max(dim=-1)
    order = best_score.argsort(dim=-1, descending=True)
    merged_a = order[:, :r]
    kept_a = order[:, r:].sort(dim=-1).values
    partner = best_partner.gather(1, merged_a)

    weighted = x * size
    prefix, patch = weighted[:, :num_prefix], weighted[:, num_prefix:]
    set_a, set_b = patch[:, 0::2], patch[:, 1::2]
    patch_sizes = size[:, num_prefix:]
    size_a, size_b = patch_sizes[:, 0::2], patch_sizes[:, 1::2]

    def take(values, index):
        return values.gather(
            1, index[..., None].expand(-1, -1, values.shape[-1])
        )

    def merge_into_b(values_a, values_b):
        index = partner[..., None].expand(-1, -1, values_a.shape[-1])
        return values_b.scatter_add(1, index, take(values_a, merged_a))

    new_size = torch.cat(
        [
            size[:, :num_prefix],
            take(size_a, kept_a),
            merge_into_b(size_a, size_b),
        ],
        dim=1,
    )
    summed = torch.cat(
        [prefix, take(set_a, kept_a), merge_into_b(set_a, set_b)], dim=1
    )

    num_kept = kept_a.shape[1]
    a_index = torch.empty_like(order)
    a_index.scatter_(
        1,
        kept_a,
        num_prefix + torch.arange(num_kept, device=x.device).expand(batch, -1),
    )
    a_index.scatter_(1, merged_a, num_prefix + num_kept + partner)
    b_index = (
        num_prefix
        + num_kept
        + torch.arange(patches // 2, device=x.device).expand(batch, -1)
    )
    patch_index = torch.stack(
        [a_index[:, : patches // 2], b_index], dim=-1
    ).flatten(1)
    if patches % 2:
        patch_index = torch.cat([patch_index, a_index[:, -1:]], dim=1)
    destination = torch.cat(
        [
            torch.arange(num_prefix, device=x.device).expand(batch, -1),
            patch_index,
        ],
        dim=1,
    )
    return summed / new_size, new_size, destination


def merge_tokens(
    x: torch.Tensor,
    size: Optional[torch.Tensor],
    source: Optional[torch.Tensor],
    metric: torch.Tensor,
    r: int,
    num_prefix: int,
) -> Tuple[torch.Tensor, ...]:
    """Merge up to ``r`` tokens (no more than half the patches), carrying
    the sizes and, for every input token, the index of the token it is
    now part of (``size`` / ``source``: ``None`` before any merge)."""
    r = min(r, (x.shape[1] - num_prefix) // 2)
    if r <= 0:
        return x, size, source
    if size is None:
        size = x.new_ones(x.shape[0], x.shape[1], 1)
    x, size, destination = bipartite_merge(x, size, metric, r, num_prefix)
    source = destination if source is None else destination.gather(1, source)
    return x, size, source


def unmerge_tokens(
    x: torch.Tensor, source: Optional[torch.Tensor]
) -> torch.Tensor:
    """Tokens back on every input position (copies of their merged
    token)."""
    if source is None:
        return x
    return x.gather(1, source[..., None].expand(-1, -1, x.shape[-1]))


def merging_block_forward(
    block: nn.Module,
    x: torch.Tensor,
    size: Optional[torch.Tensor],
    source: Optional[torch.Tensor],
    r: int,
    num_prefix: int,
    removed_attn: str,
) -> Tuple[torch.Tensor, ...]:
    """One HetDPT block (timm ``Block`` layout, any form) with up to ``r``
    tokens merged between its attention and its FFN; a pure function of
    its tensors, so that it can be checkpointed."""
    attn = block.attn
    normed = block.norm1(x)
    if attention_removed(attn):
        out = attn(normed)
        metric = normed if removed_attn == 'norm' else None
    else:
        out, metric = sized_attention(attn, normed, size)
        if isinstance(attn, GatedResidualBranch):
            out = attn.blend(out, normed)
    x = x + block.drop_path1(block.ls1(out))
    if metric is not None:
        x, size, source = merge_tokens(x, size, source, metric, r, num_prefix)
    x = x + block.drop_path2(block.ls2(block.mlp(block.norm2(x))))
    return block.residual_activation(x), size, source
