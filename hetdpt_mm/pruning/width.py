"""Width pruning for HetDPT+ (docs/method.md section 6): Torch-Pruning's
isomorphic global pruning, used as is, with the widths it leaves read back
into the structure record, and the network rebuilt from that record alone.
The recipe (Isomorphic Pruning's DeiT settings, a MACs target met by
bisection): docs/user_guides/hetdpt_plus.md, *Width pruning*."""

from copy import deepcopy
from dataclasses import replace
from typing import Callable, Iterable, List, Mapping, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.layers import Attention, Mlp

from ..analysis import count_macs, count_params
from ..checkpoint.record import EXTRA_STATE_KEY, with_record
from ..cli import require_extra
from ..spec import PruneSpec, Widths
from ..structure import build
from .width_result import StageCost, WidthPruneResult, WidthTrial

#: Importance criteria (Torch-Pruning's group importances).
IMPORTANCES = ('taylor', 'magnitude')
#: Isomorphic Pruning's DeiT recipe: heads pruned at the channel ratio, head
#: dimensions at this fraction of it (their 2.6G model: 0.6, 0.6 and 0.3).
HEAD_DIM_RATIO_SHARE = 0.5
#: Their ``--round-to``.
ROUND_TO = 2


def read_widths(backbone: nn.Module) -> Widths:
    """The widths of a (possibly width-pruned) HetDPTViT, from its modules:
    embedding width from the position embedding, heads from each
    attention's ``num_heads``, FFN hidden widths from ``fc1`` (``None`` for
    a merged FFN)."""
    heads, head_dims, hidden = [], [], []
    for block in backbone.blocks:
        attn = block.attn
        if isinstance(attn, Attention):
            heads.append(attn.num_heads)
            head_dims.append(attn.head_dim)
        else:
            heads.append(0)
            head_dims.append(0)
        hidden.append(
            block.mlp.fc1.out_features if isinstance(block.mlp, Mlp) else None
        )
    return Widths(int(backbone.pos_embed.shape[-1]), heads, head_dims, hidden)


class LinearHeads(nn.Module):
    """A backbone (``out_type='cls_token'``) with its linear classifier
    heads, the model Torch-Pruning traces: the class head on the class
    token, the distillation head on the distillation token, logits averaged
    (DeiT inference).  Without heads it returns the tokens' features."""

    def __init__(
        self,
        backbone: nn.Module,
        heads: Optional[Mapping[str, nn.Linear]] = None,
    ):
        super().__init__()
        self.backbone = backbone
        self.heads = nn.ModuleDict(heads or {})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.backbone(x)[-1]
        if not isinstance(tokens, tuple):
            tokens = (tokens,)
        if not len(self.heads):
            return torch.cat(tokens, dim=-1)
        logits = [
            head(token) for head, token in zip(self.heads.values(), tokens)
        ]
        return sum(logits) / len(logits)


def _importance(name: str, tp):
    if name == 'taylor':
        return tp.importance.GroupTaylorImportance()
    return tp.importance.GroupMagnitudeImportance(p=2)


def _accumulate_taylor_gradients(
    model: LinearHeads, calibration: Iterable
) -> int:
    """Gradients of the classification loss for Taylor importance, summed
    over the calibration batches (images, or ``(images, labels)``; without
    labels the model's own top-1 predictions are the labels)."""
    if not len(model.heads):
        raise ValueError('no classifier heads: use magnitude importance')
    model.zero_grad()
    batches = 0
    for batch in calibration:
        images, labels = (
            batch if isinstance(batch, (tuple, list)) else (batch, None)
        )
        logits = model(images)
        if labels is None:
            labels = logits.detach().argmax(dim=-1)
        F.cross_entropy(logits, labels).backward()
        batches += 1
    if not batches:
        raise ValueError('Taylor importance needs calibration batches')
    return batches


class _EmptiedAttention(ValueError):
    """Global head ranking removed every head of some attention: a block
    the record cannot describe (a removed attention passes ``LN1(x)`` on)."""


def _sync_attention(pruner, backbone: nn.Module) -> None:
    """Torch-Pruning prunes the tensors; the heads and head dimension an
    attention computes with are attributes, read back from the pruner."""
    emptied = [
        index
        for index, block in enumerate(backbone.blocks)
        if isinstance(block.attn, Attention)
        and pruner.num_heads[block.attn.qkv] == 0
    ]
    if emptied:
        raise _EmptiedAttention(
            f'blocks {emptied} lose every head: prune less'
        )
    for block in backbone.blocks:
        attn = block.attn
        if isinstance(attn, Attention):
            attn.num_heads = pruner.num_heads[attn.qkv]
            attn.head_dim = attn.qkv.out_features // (3 * attn.num_heads)
            attn.attn_dim = attn.num_heads * attn.head_dim
            attn.scale = attn.head_dim**-0.5


def _prune_once(
    tp,
    model: LinearHeads,
    imp,
    ratio: float,
    round_to: int,
    example: torch.Tensor,
) -> None:
    """Isomorphic global pruning of ``model`` (in place) at one channel
    ``ratio``, in one step; heads at that ratio, head dimensions at
    :data:`HEAD_DIM_RATIO_SHARE` of it, the classifier heads' outputs kept.
    """
    backbone = model.backbone
    attentions = [
        block.attn
        for block in backbone.blocks
        if isinstance(block.attn, Attention)
    ]
    qkv_layers = tuple(attn.qkv for attn in attentions)
    tokens = [
        p
        for p in (backbone.cls_token, backbone.dist_token, backbone.pos_embed)
        if p is not None
    ]
    pruner = tp.pruner.MetaPruner(
        model,
        example_inputs=example,
        importance=imp,
        global_pruning=True,
        isomorphic=True,
        pruning_ratio=ratio,
        pruning_ratio_dict={qkv_layers: ratio * HEAD_DIM_RATIO_SHARE}
        if qkv_layers
        else None,
        num_heads={attn.qkv: attn.num_heads for attn in attentions},
        prune_num_heads=True,
        prune_head_dims=True,
        head_pruning_ratio=ratio,
        ignored_layers=list(model.heads.values()),
        unwrapped_parameters=[(p, 2) for p in tokens],
        round_to=round_to,
    )
    pruner.step()
    _sync_attention(pruner, backbone)


def _copy_with_gradients(model: nn.Module) -> nn.Module:
    """A deep copy that keeps the gradients Taylor importance reads."""
    copy = deepcopy(model)
    for source, target in zip(model.parameters(), copy.parameters()):
        if source.grad is not None:
            target.grad = source.grad.clone()
    return copy


def _cost(
    model: nn.Module, example: torch.Tensor, attention_products: bool = True
) -> Tuple[int, int]:
    return (
        count_macs(model, example, attention_products).total,
        count_params(model),
    )


def _input_stage(spec: PruneSpec, form: str) -> Optional[str]:
    """The stage name of a network about to be width-pruned; ``None`` for
    a dense one."""
    if spec.widths is not None:
        return 'input (width-pruned before)'
    return None if spec.is_dense else f'depth-pruned ({form})'


def pipeline_stages(
    backbone: nn.Module,
    heads: Mapping[str, nn.Linear],
    cost: Tuple[int, int],
    example: torch.Tensor,
    attention_products: bool = True,
) -> List[StageCost]:
    """The cost of ``backbone`` with its ``heads`` (``cost``: MACs and
    parameters, before width pruning), preceded, unless it is dense, by
    that of the dense network of its architecture with heads of the same
    outputs (the start of the pipeline, counted the same way)."""
    record = backbone.record()
    name = _input_stage(record.spec, record.form)
    if name is None:
        return [StageCost('dense', *cost)]
    dense = build(
        replace(record, spec=PruneSpec(record.spec.depth), form='pruned'),
        **backbone._output_args(),
    )
    dense_heads = {
        key: nn.Linear(
            dense.embed_dims, head.out_features, bias=head.bias is not None
        )
        for key, head in heads.items()
    }
    return [
        StageCost(
            'dense',
            *_cost(
                LinearHeads(dense, dense_heads).eval(),
                example,
                attention_products,
            ),
        ),
        StageCost(name, *cost),
    ]


def prune_width(
    backbone: nn.Module,
    heads: Optional[Mapping[str, nn.Linear]] = None,
    target_macs: Optional[float] = None,
    ratio: Optional[float] = None,
    importance: str = 'taylor',
    calibration: Optional[Iterable] = None,
    max_ratio: float = 0.9,
    search_steps: int = 10,
    round_to: int = ROUND_TO,
    check_batch: int = 2,
    attention_products: bool = True,
    logger: Optional[Callable[[str], None]] = None,
) -> WidthPruneResult:
    """Width-prune ``backbone`` (a pruned or merged HetDPTViT built with
    ``out_type='cls_token'``; it is pruned in place) and its linear
    ``heads`` (inputs only), to ``target_macs`` (of the whole classifier on
    one image of the backbone's size) or by a channel ``ratio``.

    Pruning is one-shot at one channel ratio, as Isomorphic Pruning's; for
    a MACs target that ratio is the smallest one found (by bisection over
    ``search_steps`` one-shot trials on copies, up to ``max_ratio``) whose
    MACs are at or below the target; every MACs figure is counted with or
    without the ``attention_products``.  Returns the network rebuilt from its
    new record (the structure a checkpoint carries) with the pruned
    weights; its outputs are checked against the pruned model's
    (``rebuild_error``).  Raises ``ValueError`` for settings that cannot be
    met.
    """
    tp = require_extra('torch_pruning', 'width')
    if not 0 < max_ratio < 1 or (ratio is not None and not 0 < ratio < 1):
        raise ValueError('ratio and max_ratio must be in (0, 1)')
    record = backbone.record()
    model = LinearHeads(backbone, heads).eval()
    example = torch.randn(
        1, backbone._build_args['in_channels'], *backbone.img_size
    )
    macs_before, params_before = _cost(model, example, attention_products)
    stages = pipeline_stages(
        backbone,
        dict(model.heads.items()),
        (macs_before, params_before),
        example,
        attention_products,
    )
    if target_macs is not None and target_macs >= macs_before:
        raise ValueError(f'the model is within the target ({macs_before:.4g})')
    check_input = torch.randn(
        check_batch,
        *example.shape[1:],
        generator=torch.Generator().manual_seed(0),
    )

    imp = _importance(importance, tp)
    if importance == 'taylor':
        _accumulate_taylor_gradients(model, calibration or ())

    trials = []
    if ratio is None:

        def far_enough(trial_ratio: float) -> bool:
            """Whether pruning at ``trial_ratio`` meets the target, or goes
            beyond it so far that an attention loses all its heads."""
            trial = _copy_with_gradients(model)
            try:
                _prune_once(tp, trial, imp, trial_ratio, round_to, example)
            except _EmptiedAttention as err:
                if logger is not None:
                    logger(f'width pruning at ratio {trial_ratio:.4f}: {err}')
                return True
            macs, params = _cost(trial, example, attention_products)
            trials.append(WidthTrial(trial_ratio, macs, params))
            if logger is not None:
                logger(
                    f'width pruning at ratio {trial_ratio:.4f}: '
                    f'{macs / 1e9:.3f} GMACs, {params / 1e6:.2f} M params'
                )
            return macs <= target_macs

        if not far_enough(max_ratio):
            raise ValueError('target not reached: raise max_ratio')
        low, ratio = 0.0, max_ratio
        for _ in range(search_steps):
            middle = (low + ratio) / 2
            if far_enough(middle):
                ratio = middle
            else:
                low = middle
    _prune_once(tp, model, imp, ratio, round_to, example)
    macs_after, params_after = _cost(model, example, attention_products)
    model.zero_grad(set_to_none=True)
    stages.append(StageCost('width-pruned', macs_after, params_after))

    new_record = replace(
        record, spec=record.spec.with_widths(read_widths(backbone))
    )
    rebuilt = build(new_record, **backbone._output_args())
    state = {
        k: v.detach()
        for k, v in backbone.state_dict().items()
        if k != EXTRA_STATE_KEY
    }
    rebuilt.load_state_dict(with_record(state, new_record))
    rebuilt_model = LinearHeads(rebuilt, dict(model.heads.items())).eval()
    with torch.no_grad():
        error = (model(check_input) - rebuilt_model(check_input)).abs().max()
    return WidthPruneResult(
        backbone=rebuilt,
        heads=dict(model.heads.items()),
        record=new_record,
        macs_before=macs_before,
        params_before=params_before,
        macs_after=macs_after,
        params_after=params_after,
        ratio=ratio,
        trials=trials,
        rebuild_error=float(error),
        stages=stages,
        attention_products=attention_products,
    )
