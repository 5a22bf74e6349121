"""Token merging (ToMe, Bolya et al., ICLR 2023) inside the HetDPT ViTs'
blocks, in every form; docs/user_guides/token_merge.md says what is merged,
where and why.

Between a block's attention and its FFN, ``r`` tokens are merged into their
most similar partners by bipartite soft matching on the attention keys
(averaged over heads), as facebookresearch/ToMe's ``bipartite_soft_matching``:
the whole sequence alternates between sets A and B, prefix tokens (class,
distillation and, which ToMe does not know, register tokens) included but
never merged.  Merged tokens are size-weighted averages and, with
``prop_attn``, attention adds ``log(size)`` to its logits.  A ``source``
index remembers where every input token went, so featmap outputs are
unmerged onto the full grid (as ToMe for Stable Diffusion does) and
dense-prediction heads see every position.
"""

import math
from dataclasses import dataclass
from typing import List, Optional, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.layers import Attention

from .gates import GatedResidualBranch
from .layers import AttentionBypass, RemovedBranch

#: What a block whose attention was removed merges on: ``'norm'`` (its
#: LN1-normalised tokens, the features its residual branch carries; with
#: whole-branch removal, which leaves no LN1, its input) or ``'none'``
#: (such blocks merge nothing).
REMOVED_ATTN_METRICS = ('norm', 'none')
#: The named schedules, as ToMe's inflection: ``r`` in every block, or
#: ToMe's "decreasing schedule" (``2r`` in the first block down to 0).
SCHEDULES = {'constant': 0.0, 'decreasing': -1.0}
#: More tokens per block than any image has (a schedule of a larger ``r``
#: would not fit a float).
MAX_R = 2**31 - 1


#: The values each option takes.
OPTIONS_DOC = 'docs/user_guides/token_merge.md'


def option_keys(option: str, value, keys: set, required: str) -> dict:
    """A backbone option's config dict: ``required`` and other ``keys``."""
    if not isinstance(value, dict):
        raise ValueError(f'{option} must be a dict or None, got {value!r}')
    if required not in value or not set(value) <= keys:
        raise ValueError(f'{option} needs {required} and takes {sorted(keys)}')
    return dict(value)


def check_fields(option: str, options, valid: dict) -> None:
    """Refuse the first field of ``options`` (a dataclass) whose value is
    not ``valid`` (``{field: bool}``)."""
    bad = next((name for name, ok in valid.items() if not ok), None)
    if bad:
        value = getattr(options, bad)
        raise ValueError(f'{option} {bad}={value!r:.40} ({OPTIONS_DOC})')


@dataclass(frozen=True)
class TokenMerge:
    """The ``token_merge`` option of a backbone (``dict(r=..., ...)``).

    ``r`` is a number of tokens per block, scheduled by ``inflect`` as
    ToMe's ``parse_r(depth, (r, inflect))`` (0: constant, -1: decreasing,
    +1: increasing), or a list with one entry per block.
    """

    r: Union[int, Tuple[int, ...]]
    inflect: float = 0.0
    removed_attn: str = 'norm'
    prop_attn: bool = True

    def __post_init__(self):
        values = self.r if isinstance(self.r, tuple) else (self.r,)
        inflect = self.inflect
        valid = dict(
            r=all(type(v) is int and 0 <= v <= MAX_R for v in values),
            # a number from -1 to 1, none with a list r
            inflect=type(inflect) in (int, float)
            and -1 <= inflect <= 1
            and not (inflect and values is self.r),
            removed_attn=self.removed_attn in REMOVED_ATTN_METRICS,
            prop_attn=isinstance(self.prop_attn, bool),
        )
        check_fields('token_merge', self, valid)

    @classmethod
    def coerce(cls, value) -> Optional['TokenMerge']:
        """A ``TokenMerge`` from a config value (``None``: no merging);
        ``schedule`` names an ``inflect``."""
        if value is None or isinstance(value, cls):
            return value
        keys = {'r', 'schedule', 'inflect', 'removed_attn', 'prop_attn'}
        value = option_keys('token_merge', value, keys, 'r')
        if isinstance(value['r'], list):
            value['r'] = tuple(value['r'])
        if 'schedule' in value:
            schedule = value.pop('schedule')
            if schedule not in SCHEDULES or 'inflect' in value:
                raise ValueError(
                    f'token_merge schedule: one of {[*SCHEDULES]}, no inflect'
                )
            value['inflect'] = SCHEDULES[schedule]
        return cls(**value)

    def per_block(self, depth: int) -> List[int]:
        """Tokens merged in each of ``depth`` blocks (before the cap by the
        tokens there are): ToMe's ``parse_r``, truncating toward zero (one
        block: the first block's value)."""
        if isinstance(self.r, tuple) and len(self.r) != depth:
            raise ValueError(f'token_merge r lists {len(self.r)} blocks')
        if isinstance(self.r, tuple):
            return list(self.r)
        first = int(self.r * (1.0 - self.inflect))
        if depth == 1:
            return [first]
        step = (2 * self.r - 2 * first) / (depth - 1)
        return [int(first + step * i) for i in range(depth)]


def attention_removed(attn: nn.Module) -> bool:
    """Whether a block's attention sublayer is removed (pruned / merged
    forms) or gated shut (gated form)."""
    if isinstance(attn, (AttentionBypass, RemovedBranch)):
        return True
    return isinstance(attn, GatedResidualBranch) and not attn.is_open


def attention_inputs(attn: Attention, x: torch.Tensor):
    """The query, key and value (``B, H, N, D``) of timm's ``Attention``
    on ``x``, normalised as it does."""
    batch, tokens, _ = x.shape
    qkv = (
        attn.qkv(x)
        .reshape(batch, tokens, 3, attn.num_heads, attn.head_dim)
        .permute(2, 0, 3, 1, 4)
    )
    query, key, value = qkv.unbind(0)
    return attn.q_norm(query), attn.k_norm(key), value


def attention_output(
    attn: Attention, x: torch.Tensor, mixed: torch.Tensor
) -> torch.Tensor:
    """timm's ``Attention`` output from the heads' mixed values
    (``B, H, N, D``) on input ``x``."""
    batch, tokens, _ = x.shape
    out = attn.norm(
        mixed.transpose(1, 2).reshape(batch, tokens, attn.attn_dim)
    )
    if attn.gate is not None:
        out = out * attn.gate(x).sigmoid()
    return attn.proj_drop(attn.proj(out))


def sized_attention(
    attn: Attention, x: torch.Tensor, size: Optional[torch.Tensor]
) -> Tuple[torch.Tensor, torch.Tensor]:
    """timm's ``Attention.forward`` with ``log(size)`` added to the logits
    (``size=None``: all tokens of size 1, no bias), also returning the keys
    averaged over heads, the matching metric."""
    query, key, value = attention_inputs(attn, x)
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
    return attention_output(attn, x, out), key.mean(dim=1)


def interleave(even: torch.Tensor, odd: torch.Tensor) -> torch.Tensor:
    """``even`` at positions 0, 2, 4, ... and ``odd`` at 1, 3, ... of one
    sequence (dimension 1; ``even`` as long as ``odd`` or one longer):
    undoes the A/B split."""
    pairs = torch.stack([even[:, : odd.shape[1]], odd], dim=2).flatten(1, 2)
    return torch.cat([pairs, even[:, odd.shape[1] :]], dim=1)


def bipartite_merge(
    x: torch.Tensor,
    size: torch.Tensor,
    metric: torch.Tensor,
    r: int,
    num_prefix: int,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Merge ``r`` tokens of ``x`` (``B, N, C``) by ToMe's bipartite soft
    matching on ``metric`` (``B, N, D``): tokens 0, 2, 4, ... are set A,
    1, 3, 5, ... set B; the ``num_prefix`` first tokens are masked (never
    merged, never merged into), and each of the ``r`` A tokens most similar
    (cosine) to some B token is averaged into it, weighted by ``size``
    (``B, N, 1``).

    Returns the merged tokens ``[prefix in order, kept A, B]`` (kept A in
    input order, or in ToMe's order of similarity without prefix tokens),
    their sizes and, for each input token, its index in the output.
    """
    batch, tokens, _ = x.shape
    prefix_a, prefix_b = (num_prefix + 1) // 2, num_prefix // 2
    metric = metric.detach()
    metric = metric / metric.norm(dim=-1, keepdim=True)
    scores = metric[:, 0::2] @ metric[:, 1::2].transpose(1, 2)
    # Out of place: an indexed assignment exports to ONNX as ScatterND,
    # which OpenVINO does not convert here.
    is_prefix_a = torch.arange(scores.shape[1], device=x.device) < prefix_a
    is_prefix_b = torch.arange(scores.shape[2], device=x.device) < prefix_b
    scores = scores.masked_fill(
        is_prefix_a[:, None] | is_prefix_b[None, :], -math.inf
    )
    best_score, best_partner = scores.max(dim=-1)
    order = best_score.argsort(dim=-1, descending=True)
    merged_a, kept_a = order[:, :r], order[:, r:]
    if num_prefix:
        kept_a = kept_a.sort(dim=-1).values  # prefix tokens first
    partner = best_partner.gather(1, merged_a)

    def merge(values):
        set_a, set_b = values[:, 0::2], values[:, 1::2]
        channels = values.shape[-1]

        def take(index):
            return set_a.gather(1, index[..., None].expand(-1, -1, channels))

        set_b = set_b.scatter_reduce(
            1,
            partner[..., None].expand(-1, -1, channels),
            take(merged_a),
            reduce='sum',
        )
        kept = take(kept_a)
        prefix = interleave(kept[:, :prefix_a], set_b[:, :prefix_b])
        return torch.cat(
            [prefix, kept[:, prefix_a:], set_b[:, prefix_b:]], dim=1
        )

    summed = merge(x * size)
    new_size = merge(size)

    kept_rank = torch.arange(kept_a.shape[1], device=x.device)
    kept_position = torch.where(
        kept_rank < prefix_a, 2 * kept_rank, num_prefix + kept_rank - prefix_a
    )
    b_rank = torch.arange(tokens // 2, device=x.device)
    b_position = torch.where(
        b_rank < prefix_b,
        2 * b_rank + 1,
        num_prefix + kept_a.shape[1] - prefix_a + b_rank - prefix_b,
    )
    a_index = torch.empty_like(order)
    a_index.scatter_(1, kept_a, kept_position.expand(batch, -1))
    a_index.scatter_(1, merged_a, b_position[partner])
    destination = interleave(a_index, b_position.expand(batch, -1))
    return summed / new_size, new_size, destination


def merge_tokens(
    x: torch.Tensor,
    size: Optional[torch.Tensor],
    source: Optional[torch.Tensor],
    metric: torch.Tensor,
    r: int,
    num_prefix: int,
) -> Tuple[torch.Tensor, ...]:
    """Merge up to ``r`` tokens (no more than half the tokens after the
    prefix, as ToMe), carrying the sizes and, for every input token, the
    index of the token it is now part of (``size`` / ``source``: ``None``
    before any merge)."""
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
    prop_attn: bool,
    whole_branch: bool,
) -> Tuple[torch.Tensor, ...]:
    """One HetDPT block (timm ``Block`` layout, any form) with up to ``r``
    tokens merged between its attention and its FFN (``prop_attn``:
    attention weighted by token size; ``whole_branch``: removed attention
    takes its LN1 along); a pure function of its tensors, so that it can
    be checkpointed."""
    attn = block.attn
    normed = block.norm1(x)
    if attention_removed(attn):
        out = attn(normed)
        # Whole-branch removal leaves no LN1 in the pruned and merged
        # forms: every form merges on the block's input.
        metric = (
            (x if whole_branch else normed) if removed_attn == 'norm' else None
        )
    else:
        out, metric = sized_attention(
            attn, normed, size if prop_attn else None
        )
        if isinstance(attn, GatedResidualBranch):
            out = attn.blend(out, normed)
    x = x + block.drop_path1(block.ls1(out))
    if metric is not None:
        x, size, source = merge_tokens(x, size, source, metric, r, num_prefix)
    x = x + block.drop_path2(block.ls2(block.mlp(block.norm2(x))))
    return block.residual_activation(x), size, source
