"""The two MACs conventions (docs/user_guides/reproduce.md): with the two token
x token products of every attention (the default, the physical work) and
without them (the paper's pruned rows, what counters blind to fused attention
report).  The traced count and the analytic one agree under both, and an
independent counter, torch's FlopCounterMode, agrees with the project's
count with products when attention runs on the math backend."""

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from hetdpt_benchmark.builders import AUTHORS_SPEC
from hetdpt_mm.analysis import (
    MACS_CONVENTIONS,
    analytic_macs,
    count_macs,
    macs_convention,
)
from hetdpt_mm.models import HetDPTViT
from hetdpt_mm.models.layerscale_vit.backbone import HetDPTLayerScaleViT
from hetdpt_mm.models.swin.backbone import HetDPTSwin
from hetdpt_mm.pruning import AnalyticCost
from hetdpt_mm.registry import FAMILIES
from hetdpt_mm.spec import PruneSpec, Widths

#: The operators FlopCounterMode counts as matrix products (2 FLOPs per MAC).
MATMUL_FLOP_OPS = ('convolution', 'addmm', 'mm', 'bmm', 'baddbmm')
#: Per-block widths of a HetDPT+ DeiT-B on the authors' spec
#: (docs/user_guides/hetdpt_plus.md's example record).
PLUS_WIDTHS = Widths(
    368,
    [0, 6, 5, 0, 4, 5, 6, 0, 0, 7, 7, 0],
    [0, 46, 44, 0, 44, 50, 46, 0, 0, 46, 50, 0],
    [1474, 1498, None, 1474, 1482, 1476, 1472, None, None, 1472, None, None],
)


def flop_counter_macs(model, image, math_backend: bool) -> int:
    """Matrix-product MACs of ``model(image)`` by FlopCounterMode: with the
    math attention backend, or with whatever kernel the device picks."""
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        if math_backend:
            with sdpa_kernel(SDPBackend.MATH):
                model(image)
        else:
            model(image)
    flops = counter.get_flop_counts()['Global']
    return (
        sum(
            v
            for k, v in flops.items()
            if str(k).split('.')[1] in MATMUL_FLOP_OPS
        )
        // 2
    )


def test_convention_names():
    assert MACS_CONVENTIONS == {
        'with-attention-products': True,
        'without-attention-products': False,
    }
    assert macs_convention(True) == 'with-attention-products'
    assert macs_convention(False) == 'without-attention-products'


def test_analytic_cost_without_products_drops_two_n2d_per_attention():
    with_products = AnalyticCost.from_arch('deit-base')
    without = AnalyticCost.from_arch('deit-base', attention_products=False)
    tokens, dim = 197, 768
    assert (
        with_products.attention_macs - without.attention_macs
        == 2 * tokens**2 * dim
    )
    assert without.attention_macs == 4 * tokens * dim**2
    assert without.ffn_macs == with_products.ffn_macs
    assert without.describe().startswith(
        'analytic MACs without-attention-products (attention products left '
        'out): '
    )
    assert with_products.describe().startswith(
        'analytic MACs with-attention-products: D=768'
    )


@pytest.mark.parametrize(
    'family',
    sorted(
        name
        for name, cls in FAMILIES.items()
        if cls.__module__.startswith('hetdpt_mm.')
    ),
)
def test_counted_equals_analytic_under_both_conventions(family, one_thread):
    """Merged, with blocks of all four kinds, at 32 x 32."""
    cls = FAMILIES[family]
    depth = cls.codec.arch_depth(cls.SMALL_ARGS['arch'])
    spec = PruneSpec(
        depth, attn_removed=[0, depth - 1], act_removed=[1, depth - 1]
    )
    network = cls(**cls.SMALL_ARGS, prune_spec=spec, merged=True).eval()
    image = torch.randn(1, 3, 32, 32)
    counts = {}
    for products in (True, False):
        macs = count_macs(network, image, products)
        assert macs.to_dict()['convention'] == macs_convention(products)
        assert macs.matmul == analytic_macs(network, (32, 32), products)
        counts[products] = macs
    assert counts[True].matmul > counts[False].matmul
    assert 'scaled_dot_product_attention' not in counts[False].by_operator
    assert (
        counts[True].total - counts[False].total
        == counts[True].matmul - counts[False].matmul
    )


@pytest.mark.parametrize(
    'name', ['deit-b', 'deit-b_merged', 'swin-s', 'dinov2-g']
)
def test_flop_counter_math_backend_equals_count_with_products(name):
    """On the meta device (no weights, no time): DeiT-B dense, the
    authors' spec merged (distilled), Swin-S, DINOv2-g."""
    with torch.device('meta'):
        if name.startswith('deit-b'):
            merged = name.endswith('merged')
            network = HetDPTViT(
                arch='deit-base',
                img_size=224,
                patch_size=16,
                distilled=merged,
                prune_spec=AUTHORS_SPEC if merged else None,
                merged=merged,
            )
        elif name == 'swin-s':
            network = HetDPTSwin(arch='small')
        else:
            network = HetDPTLayerScaleViT(arch='dinov2-giant', img_size=224)
        image = torch.empty(1, 3, 224, 224)
    network.eval()
    assert flop_counter_macs(
        network, image, math_backend=True
    ) == analytic_macs(network, (224, 224), attention_products=True)


def test_flop_counter_on_hetdpt_plus_and_fused_attention(one_thread):
    """A width-pruned (HetDPT+) DeiT-B on the CPU: the math backend gives
    the count with products; the fused kernel the CPU picks is counted as 0,
    which is the convention without them."""
    torch.manual_seed(0)
    network = HetDPTViT(
        arch='deit-base',
        img_size=224,
        patch_size=16,
        distilled=True,
        prune_spec=AUTHORS_SPEC.with_widths(PLUS_WIDTHS),
        merged=True,
    ).eval()
    image = torch.randn(1, 3, 224, 224)
    with_products = count_macs(network, image, True).matmul
    without = count_macs(network, image, False).matmul
    assert (
        flop_counter_macs(network, image, math_backend=True) == with_products
    )
    assert flop_counter_macs(network, image, math_backend=False) == without
    # The seven kept attentions' products: 2 N^2 (heads x head dim) each.
    tokens = 198
    kept = [
        h * d
        for h, d in zip(PLUS_WIDTHS.num_heads, PLUS_WIDTHS.head_dims)
        if h
    ]
    assert with_products - without == 2 * tokens**2 * sum(kept)


def test_unfused_multihead_attention_products_are_left_out():
    """mmcv's attention (DETR, mmseg's ViT) runs ``nn.MultiheadAttention``
    with its weights: the products are ``bmm`` / ``baddbmm`` there."""

    class WithWeights(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = torch.nn.MultiheadAttention(16, 2, batch_first=True)

        def forward(self, query, key, mask):
            unmasked = self.attn(query, key, key)[0]
            return unmasked, self.attn(query, key, key, attn_mask=mask)[0]

    query, key = torch.randn(1, 5, 16), torch.randn(1, 7, 16)
    mask = torch.zeros(5, 7)
    with_products, without = (
        count_macs(WithWeights().eval(), (query, key, mask), products)
        for products in (True, False)
    )
    projections = (5 + 2 * 7 + 5) * 16 * 16  # q, k, v and output
    assert without.matmul == 2 * projections
    assert with_products.matmul == 2 * (projections + 2 * 5 * 7 * 16)
    assert {'bmm', 'baddbmm'} <= set(with_products.by_operator)


TINY_ARCH = dict(embed_dims=48, num_layers=4, num_heads=3, mlp_ratio=4.0)
#: Whole-branch removal: attention branches 0 and 3, the GELU of block 1
#: (a SwiGLU FFN has none) and the FFN branch of block 2 removed.
WHOLE_BRANCH_NETWORKS = {
    'vit': (HetDPTViT, TINY_ARCH, [1]),
    'layerscale': (HetDPTLayerScaleViT, TINY_ARCH, [1]),
    'swiglu': (
        HetDPTLayerScaleViT,
        dict(TINY_ARCH, mlp_ratio=2.66667 * 2, ffn='swiglu'),
        [],
    ),
}


@pytest.mark.parametrize('name', sorted(WHOLE_BRANCH_NETWORKS))
def test_removed_ffn_branches_counted_equals_analytic(name, one_thread):
    """Merged, under both conventions: the traced count equals the
    family's analytic one and, for a GELU FFN, the cost model's price of
    the three kinds (a removed FFN branch saves the whole FFN)."""
    family, arch, act_removed = WHOLE_BRANCH_NETWORKS[name]
    spec = PruneSpec(
        4, attn_removed=[0, 3], act_removed=act_removed, ffn_removed=[2]
    )
    network = family(
        arch=arch,
        patch_size=14,
        img_size=56,
        out_type='raw',
        prune_spec=spec,
        removed_attn_output='identity',
        merged=True,
    ).eval()
    image = torch.randn(1, 3, 56, 56)
    for products in (True, False):
        counted = count_macs(network, image, products).matmul
        assert counted == analytic_macs(network, (56, 56), products)
        if act_removed:
            cost = AnalyticCost(
                embed_dim=48,
                num_heads=3,
                depth=4,
                img_size=56,
                patch_size=14,
                attention_products=products,
            )
            assert counted == cost.total(n_attn=2, n_act=1, n_ffn=1)
            assert cost.total(0) - cost.total(0, n_ffn=1) == cost.ffn_macs
