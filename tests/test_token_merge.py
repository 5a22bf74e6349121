"""Token merging (ToMe) in the HetDPT ViTs, against a plainly written
reference of bipartite soft matching (issue 32)."""

import math

import pytest
import torch
import torch.nn.functional as F
from helpers import (
    MIXED_SPEC,
    REPO,
    assert_distilled_forms_agree,
    build_model,
    detection_batch,
    randomize_,
    segmentation_batch,
)
from mmengine.config import Config
from mmengine.optim import build_optim_wrapper

from hetdpt_benchmark.options import BenchmarkOptions, resolve_options
from hetdpt_benchmark.run import run_benchmark
from hetdpt_mm.errors import UsageError
from hetdpt_mm.models import HetDPTLayerScaleViT, HetDPTSwin, HetDPTViT
from hetdpt_mm.models.graph_propagation import GraphPropagation
from hetdpt_mm.models.token_merge import TokenMerge, bipartite_merge

torch.set_num_threads(2)

ARCH = dict(embed_dims=96, num_layers=12, num_heads=3)
SMALL = dict(arch=ARCH, img_size=32, patch_size=4)


def build(token_merge=None, **kwargs):
    kwargs = dict(SMALL, **dict(dict(prune_spec=MIXED_SPEC), **kwargs))
    return HetDPTViT(token_merge=token_merge, **kwargs).eval()


def images(batch=2, seed=1):
    return torch.randn(
        batch, 3, 32, 32, generator=torch.Generator().manual_seed(seed)
    )


# ------------------------------------------------ the plain reference
def reference_matching(x, size, metric, r, num_prefix):
    """Bipartite soft matching one image and one token at a time, as
    facebookresearch/ToMe: tokens alternate A, B over the whole sequence;
    the r A tokens after the prefix whose best cosine similarity to a B
    token after the prefix is highest are averaged (size-weighted) into
    that B token. Returns tokens [prefix, kept A, B], their sizes and the
    output index of every input token (kept A in input order, or by
    similarity without a prefix, as ToMe orders them)."""
    out_x, out_size, out_dest = [], [], []
    for image in range(x.shape[0]):
        tokens = list(range(x.shape[1]))
        set_a = tokens[num_prefix:][(num_prefix % 2) :: 2]
        set_b = tokens[num_prefix:][1 - num_prefix % 2 :: 2]
        best = {}
        for a in set_a:
            sims = F.cosine_similarity(
                metric[image, a : a + 1], metric[image, set_b], dim=-1
            )
            best[a] = (sims.max().item(), set_b[int(sims.argmax())])
        ranked = sorted(set_a, key=lambda a: -best[a][0])
        merged = set(ranked[:r])
        kept = [a for a in set_a if a not in merged]
        order = tokens[:num_prefix] + (kept if num_prefix else ranked[r:])
        order += set_b
        rows, sizes = [], []
        for token in order:
            group = [token] + [a for a in merged if best[a][1] == token]
            weight = sum(size[image, t] for t in group)
            rows.append(
                sum(x[image, t] * size[image, t] for t in group) / weight
            )
            sizes.append(weight)
        dest = [
            order.index(t) if t in order else order.index(best[t][1])
            for t in tokens
        ]
        out_x.append(torch.stack(rows))
        out_size.append(torch.stack(sizes))
        out_dest.append(torch.tensor(dest))
    return torch.stack(out_x), torch.stack(out_size), torch.stack(out_dest)


def reference_forward(model, x, schedule, removed_attn='norm', prop_attn=True):
    """The backbone's featmap under ToMe, written out from its weights:
    attention with log(size) on its logits (with ``prop_attn``), keys
    averaged over heads as the metric, and every input patch given its
    merged token."""
    spec = model.prune_spec
    tokens = model._embed_tokens(x)[0]
    batch, count, dim = tokens.shape
    size = torch.ones(batch, count, 1)
    where = torch.arange(count).expand(batch, -1)
    prefix = model.num_prefix_tokens
    for index, block in enumerate(model.blocks):
        normed = block.norm1(tokens)
        if spec.is_removed('attn', index):
            out = normed
            metric = normed if removed_attn == 'norm' else None
        else:
            attn = block.attn
            heads, head_dim = attn.num_heads, attn.head_dim
            q, k, v = (
                attn.qkv(normed)
                .reshape(batch, -1, 3, heads, head_dim)
                .permute(2, 0, 3, 1, 4)
            )
            logits = q @ k.transpose(-2, -1) / math.sqrt(head_dim)
            if prop_attn:
                logits = logits + size.log().reshape(batch, 1, 1, -1)
            mixed = logits.softmax(-1) @ v
            out = attn.proj(mixed.transpose(1, 2).reshape(batch, -1, dim))
            metric = k.mean(1)
        tokens = tokens + out
        if metric is not None:
            r = min(schedule[index], (tokens.shape[1] - prefix) // 2)
            if r > 0:
                tokens, size, dest = reference_matching(
                    tokens, size, metric, r, prefix
                )
                where = dest.gather(1, where)
        tokens = tokens + block.mlp(block.norm2(tokens))
        tokens = block.residual_act(tokens)
    tokens = model.norm(tokens)
    full = tokens.gather(1, where[..., None].expand(-1, -1, dim))
    grid = model.patch_grid
    return full[:, prefix:].reshape(batch, *grid, dim).permute(0, 3, 1, 2)


# ---------------------------------------------------------------- tests
@pytest.mark.parametrize('num_prefix', [0, 1, 2, 5])
@pytest.mark.parametrize('tokens', [17, 18])
def test_matching_equals_the_reference(num_prefix, tokens):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, tokens, 8, generator=generator)
    size = torch.randint(1, 4, (2, tokens, 1), generator=generator).float()
    metric = torch.randn(2, tokens, 5, generator=generator)
    for r in (1, 3, (tokens - num_prefix) // 2):
        merged, sizes, dest = bipartite_merge(x, size, metric, r, num_prefix)
        ref_x, ref_size, ref_dest = reference_matching(
            x, size, metric, r, num_prefix
        )
        assert torch.equal(sizes, ref_size)
        assert torch.equal(dest, ref_dest)
        assert (merged - ref_x).abs().max() <= 1e-6
        assert merged.shape == (2, tokens - r, 8)


@pytest.mark.parametrize(
    'token_merge',
    [
        dict(r=4),
        dict(r=3, schedule='decreasing'),
        dict(r=4, removed_attn='none'),
        dict(r=[5, 0, 3, 9, 0, 2] * 2),
        dict(r=4, inflect=0.5, prop_attn=False),
    ],
)
def test_backbone_equals_the_reference(token_merge):
    model = randomize_(build(token_merge, out_type='featmap'))
    x = images()
    options = TokenMerge.coerce(token_merge)
    with torch.no_grad():
        expected = reference_forward(
            model,
            x,
            options.per_block(12),
            options.removed_attn,
            options.prop_attn,
        )
        (featmap,) = model(x)
        plain = build(out_type='featmap')
        plain.load_state_dict(model.state_dict())
        (unmerged,) = plain(x)
    assert featmap.shape == unmerged.shape == (2, 96, 8, 8)
    assert (featmap - expected).abs().max() <= 1e-5
    assert (featmap - unmerged).abs().max() > 1e-2  # merging did something


@pytest.mark.parametrize(
    'token_merge, depth, expected',
    [
        # ToMe's parse_r(12, (8, -1)): truncated, 91 tokens in all.
        (
            dict(r=8, schedule='decreasing'),
            12,
            [16, 14, 13, 11, 10, 8, 7, 5, 4, 2, 1, 0],
        ),
        (
            dict(r=8, inflect=-1.0),
            12,
            [16, 14, 13, 11, 10, 8, 7, 5, 4, 2, 1, 0],
        ),
        (dict(r=3, inflect=0.5), 4, [1, 2, 3, 5]),
        (dict(r=5), 3, [5, 5, 5]),
        (dict(r=4, inflect=-1), 1, [8]),
    ],
)
def test_schedule_is_tomes_parse_r(token_merge, depth, expected):
    assert TokenMerge.coerce(token_merge).per_block(depth) == expected


def test_r0_is_no_merging_bit_for_bit():
    model = randomize_(
        build(dict(r=0), out_type='featmap', out_indices=(3, 11))
    )
    plain = build(out_type='featmap', out_indices=(3, 11))
    plain.load_state_dict(model.state_dict())
    x = images()
    with torch.no_grad():
        for merged, unmerged in zip(model(x), plain(x)):
            assert torch.equal(merged, unmerged)


def test_gated_pruned_merged_agree_with_merging():
    token_merge = dict(r=4, schedule='decreasing')
    gated = randomize_(build(token_merge, gated=True, distilled=True))
    pruned = build(token_merge, distilled=True)
    pruned.load_state_dict(gated.state_dict(), strict=False)
    merged = pruned.to_merged().eval()
    assert merged.token_merge == TokenMerge.coerce(token_merge)
    assert_distilled_forms_agree(gated, (pruned, merged), images())


def test_removed_attention_merges_nothing_with_none():
    spec = dict(attn_removed=list(range(12)), act_removed=[])
    model = randomize_(
        build(
            dict(r=8, removed_attn='none'), prune_spec=spec, out_type='featmap'
        )
    )
    plain = build(prune_spec=spec, out_type='featmap')
    plain.load_state_dict(model.state_dict())
    x = images()
    with torch.no_grad():
        assert torch.equal(model(x)[0], plain(x)[0])


def test_prefix_tokens_are_never_merged():
    model = randomize_(
        HetDPTLayerScaleViT(
            **HetDPTLayerScaleViT.SMALL_ARGS,
            reg_tokens=4,
            out_type='raw',
            token_merge=dict(r=4),
        ).eval()
    )
    plain = HetDPTLayerScaleViT(
        **HetDPTLayerScaleViT.SMALL_ARGS, reg_tokens=4, out_type='raw'
    ).eval()
    plain.load_state_dict(model.state_dict())
    x = images()
    with torch.no_grad():
        (tokens,) = model(x)
        (reference,) = plain(x)
    assert tokens.shape == reference.shape == (2, 5 + 64, 96)
    # Outputs are unmerged: the 64 patches are copies of the 64 - 6 x 4
    # merged ones, and the five prefix tokens are their own.
    assert len(torch.unique(tokens[0, 5:], dim=0)) == 40
    assert len(torch.unique(tokens[0], dim=0)) == 45


@pytest.mark.parametrize(
    'reduction',
    [
        dict(token_merge=dict(r=4)),
        dict(graph_propagation=dict(num_prop=4)),  # GTP-ViT's, alike
    ],
)
def test_gradient_checkpointing_gives_the_same_gradients(reduction):
    grads = []
    for with_cp in (False, True):
        model = build(out_type='featmap', with_cp=with_cp, **reduction)
        torch.manual_seed(0)
        randomize_(model)
        model.train()
        model(images())[0].square().mean().backward()
        grads.append(
            [p.grad for p in model.parameters() if p.grad is not None]
        )
    assert len(grads[0]) == len(grads[1]) > 0
    for plain, checkpointed in zip(*grads):
        assert torch.allclose(plain, checkpointed, atol=1e-6)


@pytest.mark.parametrize(
    'value, message',
    [
        (dict(r=-1), 'r=-1'),
        (dict(r=1.5), 'r=1.5'),
        (dict(), 'needs r'),
        (dict(r=2, rate=3), 'takes'),
        (dict(r=2, schedule='cosine'), 'schedule'),
        (dict(r=[1, 2], schedule='decreasing'), 'inflect'),
        (dict(r=2, removed_attn='keys'), 'removed_attn'),
        (dict(r=2, inflect=2), 'inflect'),
        (dict(r=2, inflect=-1, schedule='constant'), 'schedule'),
        (dict(r=[1, 2], inflect=0.5), 'inflect'),
        (dict(r=2, prop_attn=1), 'prop_attn'),
        (8, 'dict'),
    ],
)
def test_bad_options_are_named(value, message):
    with pytest.raises(ValueError, match=message):
        build(value)


def test_list_r_must_cover_every_block():
    with pytest.raises(ValueError, match='lists 2 blocks'):
        build(dict(r=[1, 2]))


@pytest.mark.parametrize(
    'reduction',
    [dict(token_merge=dict(r=4)), dict(graph_propagation=dict(num_prop=4))],
)
def test_swin_refuses_token_merging(reduction):
    with pytest.raises(ValueError, match='window'):
        HetDPTSwin(**HetDPTSwin.SMALL_ARGS, **reduction)


# ------------------------------------------------------------ benchmark
def short_benchmark(task, **options):
    resolved = resolve_options(
        BenchmarkOptions(task, repeats=1, warmup=0, **options)
    )
    return run_benchmark(resolved)


def test_benchmark_refuses_a_propagation_graph_without_propagation():
    with pytest.raises(UsageError, match='needs --graph-propagation'):
        resolve_options(
            BenchmarkOptions('backbone', propagation_graph='spatial')
        )


@pytest.mark.parametrize(
    'reduction, described',
    [
        (dict(token_merge=16), ', ToMe r=16'),
        # 16 patches: 7 propagated in each block with attention (2 of 4
        # in the pruned forms).
        (dict(graph_propagation=7), ', GTP-ViT num_prop=7 (mixed graph)'),
        (
            dict(graph_propagation=7, propagation_graph='spatial'),
            ', GTP-ViT num_prop=7 (spatial graph)',
        ),
    ],
)
def test_benchmark_merges_tokens_in_every_backbone(reduction, described):
    arch = '{"embed_dims": 96, "num_layers": 4, "num_heads": 3}'
    spec = '{"attn_removed": [0, 3], "act_removed": [1, 3]}'
    runs = [
        short_benchmark(
            'backbone',
            arch=arch,
            spec=spec,
            img_size=[64],
            batch_size=1,
            **options,
        )
        for options in ({}, reduction)
    ]
    for plain, merging in zip(runs[0]['models'], runs[1]['models']):
        assert merging['description'] == plain['description'] + described
        assert merging['params'] == plain['params']
        assert merging['macs']['matmul'] < 0.75 * plain['macs']['matmul']
        assert 'backbone_analytic_macs' not in merging


@pytest.mark.parametrize(
    'options, message',
    [
        (dict(family='swin', arch='tiny', spec=None), 'does not merge'),
        (dict(token_merge=-1), '>= 0'),
        (dict(graph_propagation=4), 'give one of them'),
        (dict(token_merge=None, graph_propagation=-1), '>= 0'),
    ],
)
def test_benchmark_refuses_what_cannot_merge(options, message):
    options = dict(dict(token_merge=8), **options)
    with pytest.raises(UsageError, match=message):
        resolve_options(BenchmarkOptions('backbone', **options))


def test_benchmark_refuses_the_stock_upernet():
    with pytest.raises(UsageError, match='stock model'):
        resolve_options(BenchmarkOptions('upernet', token_merge=8))


# ------------------------------------------------------ dense prediction
#: The dense-prediction configs of both token reductions, and the option
#: each sets.
REDUCING_CONFIGS = {
    'detr': [
        ('tome/detr_hetdpt_deit_b_tome-r8.py', 'token_merge', TokenMerge(8)),
        (
            'gtp/detr_hetdpt_deit_b_gtp-p20.py',
            'graph_propagation',
            GraphPropagation(20),
        ),
    ],
    'upernet': [
        (
            'tome/upernet_hetdpt_deit_b_tome-r8_ade20k.py',
            'token_merge',
            TokenMerge(8),
        ),
        (
            'gtp/upernet_hetdpt_deit_b_gtp-p20_ade20k.py',
            'graph_propagation',
            GraphPropagation(20),
        ),
    ],
}


def reducing_config(name):
    cfg = Config.fromfile(REPO / 'configs' / name)
    cfg.model.backbone.update(
        init_cfg=None, prune_spec=MIXED_SPEC, merged=True, arch='deit-tiny'
    )
    cfg.model.neck.in_channels = [192] * len(cfg.model.neck.in_channels)
    return cfg


@pytest.mark.parametrize('name, option, value', REDUCING_CONFIGS['detr'])
def test_detr_config_trains_and_predicts_with_merging(name, option, value):
    model = build_model(reducing_config(name))
    assert getattr(model.backbone, option) == value
    data = detection_batch([(64, 96), (80, 64)], num_classes=80)
    optim_wrapper = build_optim_wrapper(
        model, dict(optimizer=dict(type='AdamW', lr=1e-4))
    )
    model.train()
    log_vars = model.train_step(data, optim_wrapper)
    assert torch.isfinite(log_vars['loss'])
    model.eval()
    with torch.no_grad():
        results = model.test_step(data)
    assert [r.pred_instances.bboxes.shape for r in results] == [(100, 4)] * 2


@pytest.mark.parametrize('name, option, value', REDUCING_CONFIGS['upernet'])
def test_upernet_config_trains_and_predicts_with_merging(name, option, value):
    cfg = reducing_config(name)
    cfg.model.data_preprocessor.size = (64, 64)
    model = build_model(cfg)
    assert getattr(model.backbone, option) == value
    data = segmentation_batch([(64, 64), (64, 64)], num_classes=150)
    optim_wrapper = build_optim_wrapper(
        model, dict(optimizer=dict(type='AdamW', lr=1e-4))
    )
    model.train()
    assert torch.isfinite(model.train_step(data, optim_wrapper)['loss'])
    model.eval()
    with torch.no_grad():
        (result, _) = model.test_step(data)
    assert result.pred_sem_seg.data.shape == (1, 64, 64)


@pytest.mark.parametrize(
    'cfg_options, refused',
    [
        ((), False),
        (('model.backbone.type=mmseg.VisionTransformer',), True),
        (('merged:model.backbone.type=mmseg.VisionTransformer',), True),
    ],
)
def test_benchmark_refuses_a_config_without_a_merging_backbone(
    cfg_options, refused
):
    """--token-merge with --config: a stock backbone (here the UperNet
    config's, retyped) is refused before anything is built."""
    options = BenchmarkOptions(
        'upernet',
        token_merge=8,
        config=[f'merged={REPO / "configs/upernet_hetdpt_deit_b_ade20k.py"}'],
        cfg_options=cfg_options,
    )
    if not refused:
        assert resolve_options(options).token_merge == 8
        return
    with pytest.raises(
        UsageError,
        match='--config merged .* builds a mmseg.VisionTransformer backbone',
    ):
        resolve_options(options)


@pytest.mark.parametrize('family', [HetDPTViT, HetDPTLayerScaleViT])
@pytest.mark.parametrize(
    'reduction',
    [
        dict(token_merge=dict(r=2)),
        dict(token_merge=dict(r=2, removed_attn='none')),
        dict(graph_propagation=dict(num_prop=2)),
    ],
)
def test_whole_branch_removal_with_token_reduction(family, reduction):
    """Issue 59 item 6: a removed whole branch (``RemovedBranch``) has no
    ``qkv`` and no LN1; every form merges on the block's input and agrees
    with the gated one."""
    args = dict(
        arch=dict(embed_dims=48, num_layers=4, num_heads=3),
        img_size=32,
        patch_size=8,
        prune_spec=dict(attn_removed=[1]),
        removed_attn_output='identity',
        out_type='featmap',
        **reduction,
    )
    gated = randomize_(family(gated=True, **args)).eval()
    pruned = family(**args).eval()
    pruned.load_state_dict(gated.state_dict(), strict=False)
    merged = pruned.to_merged().eval()
    x = images(seed=3)
    with torch.no_grad():
        (expected,) = gated(x)
        for model in (pruned, merged):
            (got,) = model(x)
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
