"""The one home of counting: multiply-accumulates, parameters, and the
analytic MACs a backbone's family gives per block
(docs/user_guides/benchmark.md).

MACs come from :class:`mmengine.analysis.FlopAnalyzer` (one multiply-add
counts as one, its convention), with handles added for the attention
products it does not count on its own (``scaled_dot_product_attention``,
``baddbmm``); see :func:`count_macs`.  Every count takes a convention
(:data:`MACS_CONVENTIONS`): with the two token x token products of each
attention (the physical work, the default) or without them (what counters
blind to fused attention report, and the paper's pruned rows;
docs/user_guides/reproduce.md).
"""

from dataclasses import dataclass, field
from typing import Any, Dict, List, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmengine.analysis import FlopAnalyzer, parameter_count
from mmengine.analysis.jit_handles import get_shape

from .spec import ACT, ATTN, FFN

#: mmengine operator names whose count is a matrix product (multiply-adds).
MATMUL_OPS = (
    'linear',
    'conv',
    'matmul',
    'mm',
    'bmm',
    'addmm',
    'baddbmm',
    'einsum',
    'scaled_dot_product_attention',
)
#: The operators through which the networks here compute attention's token x
#: token products: the fused kernel, and ``nn.MultiheadAttention``'s unfused
#: path (none of them computes anything else with ``bmm`` / ``baddbmm``).
ATTENTION_PRODUCT_OPS = ('scaled_dot_product_attention', 'bmm', 'baddbmm')
#: The MACs conventions by name (``--macs-convention``): whether the two
#: token x token products of every attention (``q k^T``, ``attn v``) count.
MACS_CONVENTIONS = {
    'with-attention-products': True,
    'without-attention-products': False,
}


def macs_convention(attention_products: bool) -> str:
    """The name of a MACs convention, for reports."""
    return next(
        name
        for name, value in MACS_CONVENTIONS.items()
        if value == bool(attention_products)
    )


def sdpa_macs_jit(inputs: List[Any], outputs: List[Any]) -> int:
    """``softmax(q k^T) v``: ``L S E`` for the scores plus ``L S Ev`` for
    the weighted sum, per batch and head (masks and causality ignored)."""
    query, key, value = (get_shape(v) for v in inputs[:3])
    *batch, length, embed = query
    count = 1
    for size in batch:
        count *= size
    return count * length * key[-2] * (embed + value[-1])


def baddbmm_macs_jit(inputs: List[Any], outputs: List[Any]) -> int:
    """``beta * input + alpha * (b1 @ b2)``: the batched product."""
    batch, rows, inner = get_shape(inputs[1])
    return batch * rows * inner * get_shape(inputs[2])[-1]


@dataclass
class MacCount:
    """Multiply-accumulates of one forward pass (per image)."""

    total: int
    matmul: int
    by_operator: Dict[str, int] = field(default_factory=dict)
    uncounted_ops: Dict[str, int] = field(default_factory=dict)
    attention_products: bool = True

    def to_dict(self) -> Dict[str, Any]:
        return dict(
            total=self.total,
            matmul=self.matmul,
            convention=macs_convention(self.attention_products),
            by_operator=self.by_operator,
            uncounted_ops=self.uncounted_ops,
        )


def count_macs(
    model: nn.Module,
    inputs: Union[torch.Tensor, Tuple],
    attention_products: bool = True,
) -> MacCount:
    """MACs of ``model(*inputs)`` traced by mmengine's FlopAnalyzer, plus
    the attention products (``scaled_dot_product_attention``, ``baddbmm``)
    it leaves out by default. ``matmul`` sums the matrix products only
    (what :class:`~hetdpt_mm.pruning.AnalyticCost` models); ``total`` adds
    mmengine's counts for norms, upsampling and pooling. ``uncounted_ops``
    lists operators that were traced but have no count (elementwise ones,
    and any gap).  Without ``attention_products`` the
    :data:`ATTENTION_PRODUCT_OPS` are left out of every figure."""
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    analyzer = FlopAnalyzer(model, inputs)
    analyzer.set_op_handle(
        **{
            'aten::scaled_dot_product_attention': sdpa_macs_jit,
            'aten::baddbmm': baddbmm_macs_jit,
        }
    )
    analyzer.unsupported_ops_warnings(False)
    analyzer.uncalled_modules_warnings(False)
    analyzer.tracer_warnings('none')
    # The fused nn.MultiheadAttention kernel is one opaque op to the tracer;
    # the unfused path is the same maths in countable ops.
    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with torch.no_grad():
            by_operator = dict(analyzer.by_operator())
    finally:
        torch.backends.mha.set_fastpath_enabled(fastpath)
    if not attention_products:
        by_operator = {
            k: v
            for k, v in by_operator.items()
            if k not in ATTENTION_PRODUCT_OPS
        }
    return MacCount(
        total=int(sum(by_operator.values())),
        matmul=int(sum(v for k, v in by_operator.items() if k in MATMUL_OPS)),
        by_operator={k: int(v) for k, v in by_operator.items()},
        uncounted_ops=dict(analyzer.unsupported_ops()),
        attention_products=bool(attention_products),
    )


def count_params(model: nn.Module) -> int:
    """Number of parameters (mmengine's count; shared ones once)."""
    return int(parameter_count(model)[''])


def analytic_macs(
    backbone: nn.Module,
    img_size: Sequence[int],
    attention_products: bool = True,
) -> int:
    """Analytic MACs of ``backbone`` at ``img_size`` (``H, W``; multiples of
    the patch size, like the analytic model), from its family's MACs per
    block, with or without the attention products. Unmerged FFNs cost as
    much as dense ones, with or without their GELU."""
    macs = type(backbone).codec.layer_macs(
        backbone.build_args(), img_size, attention_products=attention_products
    )
    spec = backbone.prune_spec
    merged = backbone.form == 'merged'
    total = macs['rest']
    for index in range(backbone.depth):
        if not spec.is_removed(ATTN, index):
            total += macs['attn'][index]
        if spec.is_removed(FFN, index):
            continue  # a removed FFN branch computes nothing
        total += (
            macs['merged_ffn'][index]
            if merged and spec.is_removed(ACT, index)
            else macs['ffn'][index]
        )
    return int(total)
