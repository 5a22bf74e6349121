"""hetdpt_benchmark and tools/benchmark.py:
the benchmark gives the promised fields, MACs and parameters match the
analytic counts, the merged backbone is a plain dense network, the tool
refuses bad input. No timing assertions: speed targets live in
docs/user_guides/benchmark.md, measured with the tool."""

import json
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from helpers import MIXED_SPEC, REPO, load_tool, randomize_
from timm.layers import Attention, Mlp

from hetdpt_benchmark.builders import AUTHORS_SPEC, build_backbone_variants
from hetdpt_benchmark.machine import glibc_malloc
from hetdpt_benchmark.options import BenchmarkOptions, resolve_options
from hetdpt_benchmark.report import format_markdown
from hetdpt_benchmark.run import run_benchmark
from hetdpt_benchmark.timing import amdahl_bound, rotations, time_runs
from hetdpt_mm.analysis import count_macs, count_params
from hetdpt_mm.models.gates import StraightThroughGate
from hetdpt_mm.models.layers import AttentionBypass, MergedFFN
from hetdpt_mm.models.vit.backbone import HetDPTViT

TINY_ARCH = '{"embed_dims": 96, "num_layers": 4, "num_heads": 3}'
TINY_SPEC = '{"attn_removed": [0, 3], "act_removed": [1, 3]}'


@pytest.fixture(scope='module')
def tool():
    """tools/benchmark.py, for its command-line surface (exit status and
    ``error:`` messages)."""
    return load_tool('benchmark')


def benchmark(task, **options):
    """The result (as its JSON reads back) and markdown of a short run."""
    resolved = resolve_options(
        BenchmarkOptions(task, repeats=2, warmup=0, **options)
    )
    result = run_benchmark(resolved)
    return json.loads(json.dumps(result)), format_markdown(result)


def test_authors_spec_is_the_methods_reference():
    assert AUTHORS_SPEC.attn_removed == (0, 3, 7, 8, 11)
    assert AUTHORS_SPEC.act_removed == (2, 7, 8, 10, 11)


def deit_base(distilled):
    return build_backbone_variants(
        'deit-base',
        AUTHORS_SPEC,
        variants=('dense', 'merged'),
        distilled=distilled,
    )


@pytest.fixture(scope='module')
def distilled_deit_base():
    return deit_base(distilled=True)


def test_distilled_deit_base_params(distilled_deit_base):
    # docs/method.md: 54,867,152 merged, with the distilled DeiT-B's two
    # 1000-class heads (2 x 769,000); these are the backbones alone.
    assert count_params(distilled_deit_base['dense']) == 85_800_192
    assert count_params(distilled_deit_base['merged']) == 53_329_152


def test_deit_base_params():
    models = deit_base(distilled=False)
    assert count_params(models['dense']) == 85_798_656
    assert count_params(models['merged']) == 53_327_616


def test_deit_base_macs_match_analytic(distilled_deit_base):
    image = torch.zeros(1, 3, 224, 224)
    dense, merged = (
        count_macs(model, image) for model in distilled_deit_base.values()
    )
    tokens = 196 + 2
    d = 768
    patch = 196 * 3 * 16 * 16 * d
    attention = 4 * tokens * d * d + 2 * tokens**2 * d
    ffn = 2 * tokens * d * 4 * d
    merged_ffn = tokens * d * d
    assert dense.matmul == patch + 12 * (attention + ffn)
    assert merged.matmul == (patch + 7 * attention + 7 * ffn + 5 * merged_ffn)
    # The attention products are counted (mmengine alone skips them).
    assert (
        dense.by_operator['scaled_dot_product_attention']
        == 12 * 2 * tokens**2 * d
    )
    assert (
        merged.by_operator['scaled_dot_product_attention']
        == 7 * 2 * tokens**2 * d
    )
    assert dense.matmul / merged.matmul == pytest.approx(1.614, abs=2e-3)


@pytest.mark.parametrize('form', ['pruned', 'merged'])
def test_backbone_variants_from_checkpoint(tmp_path, form):
    """Structure from the checkpoint's meta, its weights in the forms they
    convert to."""
    arch = dict(embed_dims=96, num_layers=12, num_heads=3)
    source = build_backbone_variants(
        arch, MIXED_SPEC, variants=(form,), img_size=32
    )[form]
    randomize_(source)
    path = tmp_path / f'{form}.pth'
    torch.save(
        dict(
            state_dict={
                f'backbone.{k}': v for k, v in source.state_dict().items()
            },
            meta=dict(hetdpt=source.record().to_dict()),
        ),
        path,
    )
    models = build_backbone_variants(
        'deit-base', spec=None, checkpoint=str(path)
    )
    assert models['dense'].prune_spec.is_dense
    assert models['dense'].arch_settings['embed_dims'] == 96
    assert models['merged'].form == 'merged'
    assert models['merged'].prune_spec == source.prune_spec
    loaded = models[form].state_dict()
    for key, value in source.state_dict().items():
        torch.testing.assert_close(loaded[key], value)
    if form == 'pruned':  # merged from the loaded weights: same function
        image = torch.randn(2, 3, 32, 32)
        with torch.no_grad():
            torch.testing.assert_close(
                models['merged'](image)[0],
                source(image)[0],
                rtol=1e-4,
                atol=1e-4,
            )


def test_sdpa_and_baddbmm_handles_count_products():
    class Products(nn.Module):
        def forward(self, q, k, v, bias, left, right):
            attended = F.scaled_dot_product_attention(q, k, v)
            return attended, torch.baddbmm(bias, left, right)

    q = torch.randn(2, 3, 5, 8)
    k = torch.randn(2, 3, 7, 8)
    v = torch.randn(2, 3, 7, 4)
    left, right = torch.randn(6, 5, 9), torch.randn(6, 9, 2)
    macs = count_macs(Products(), (q, k, v, torch.zeros(6, 5, 2), left, right))
    assert macs.by_operator[
        'scaled_dot_product_attention'
    ] == 2 * 3 * 5 * 7 * (8 + 4)
    assert macs.by_operator['baddbmm'] == 6 * 5 * 9 * 2
    assert macs.total == macs.matmul


def gate_modules(model: nn.Module) -> list:
    """Names of the straight-through gates in ``model``."""
    return [
        name
        for name, module in model.named_modules()
        if isinstance(module, StraightThroughGate)
    ]


def test_merged_backbone_is_plain_dense_network():
    models = build_backbone_variants(
        dict(embed_dims=96, num_layers=12, num_heads=3), MIXED_SPEC
    )
    merged = models['merged']
    assert gate_modules(merged) == []
    assert not any(
        isinstance(m, StraightThroughGate) for m in merged.modules()
    )
    for index, block in enumerate(merged.blocks):
        attn_removed = index in MIXED_SPEC['attn_removed']
        act_removed = index in MIXED_SPEC['act_removed']
        assert isinstance(
            block.attn, AttentionBypass if attn_removed else Attention
        )
        if not attn_removed:
            assert block.attn.fused_attn  # SDPA, not explicit softmax
        assert isinstance(block.mlp, MergedFFN if act_removed else Mlp)
    gated = HetDPTViT(
        arch=dict(embed_dims=96, num_layers=12, num_heads=3),
        prune_spec=MIXED_SPEC,
        gated=True,
    )
    assert len(gate_modules(gated)) == 24
    # Same function in every form (weights carried over by to_merged).
    image = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(
            merged(image)[0], models['pruned'](image)[0], rtol=1e-4, atol=1e-4
        )


def test_time_runs_rotates_order_and_keeps_every_repeat():
    calls = []
    runs = {
        name: (lambda name=name: calls.append(name))
        for name in ('a', 'b', 'c')
    }
    stats = time_runs(runs, batch_size=4, repeats=3, warmup=1, iters=2)
    assert calls[:3] == ['a', 'b', 'c']  # warm-up
    timed = calls[3:]
    assert timed == [
        'a',
        'a',
        'b',
        'b',
        'c',
        'c',
        'b',
        'b',
        'c',
        'c',
        'a',
        'a',
        'c',
        'c',
        'a',
        'a',
        'b',
        'b',
    ]
    assert rotations(['a', 'b'], 3) == [['a', 'b'], ['b', 'a'], ['a', 'b']]
    for result in stats.values():
        assert len(result.seconds) == 3
        summary = result.to_dict()
        assert summary['min_ms'] <= summary['median_ms'] <= summary['max_ms']
        assert summary['throughput'] == pytest.approx(4 / result.median)


def test_amdahl_bound():
    assert amdahl_bound(1 / 3, 1.6) == pytest.approx(1 / (2 / 3 + 1 / 4.8))
    assert amdahl_bound(0.0, 5.0) == 1.0
    assert amdahl_bound(1.0, 1.5) == pytest.approx(1.5)
    with pytest.raises(ValueError, match='share'):
        amdahl_bound(1.2, 2.0)


def test_backbone_benchmark_names_its_macs_convention(tool, capsys):
    """Every MACs figure of a run is of one convention, named in the JSON
    and the markdown; the analytic cross-check follows it."""
    counts = {}
    for convention in (
        'with-attention-products',
        'without-attention-products',
    ):
        result, markdown = benchmark(
            'backbone',
            arch=TINY_ARCH,
            spec=TINY_SPEC,
            img_size=[32],
            batch_size=1,
            threads=1,
            models=['dense'],
            macs_convention=convention,
        )
        assert result['settings']['macs_convention'] == convention
        assert f'MACs {convention} (' in markdown
        # So does every table with MACs, and the analytic cross-check.
        headers = [
            line
            for line in markdown.splitlines()
            if line.startswith('| model |')
        ]
        assert headers and all(
            f'| MACs/img ({convention}) |' in line for line in headers
        )
        assert f'Backbone MACs {convention}, mmengine' in markdown
        (dense,) = result['models']
        assert dense['macs']['convention'] == convention
        assert dense['macs']['matmul'] == dense['backbone_analytic_macs']
        counts[convention] = dense['macs']['matmul']
    # Four attentions over 5 tokens (4 patches of 16 px, the class token)
    # of width 96: 2 N^2 D each.
    assert (
        counts['with-attention-products']
        - counts['without-attention-products']
        == 4 * 2 * 5**2 * 96
    )
    assert tool.main(['backbone', '--macs-convention', 'paper']) == 2
    assert 'invalid choice' in capsys.readouterr().err


def test_backbone_benchmark_tables_and_json():
    result, markdown = benchmark(
        'backbone',
        arch=TINY_ARCH,
        spec=TINY_SPEC,
        img_size=[32],
        batch_size=2,
        threads=1,
    )
    assert result['task'] == 'backbone'
    assert result['baseline'] == 'dense'
    assert result['settings']['img_size'] == [32, 32]
    assert result['settings']['threads'] == 1
    assert {'cpu', 'logical_cores', 'torch', 'threads'} <= set(
        result['machine']
    )
    names = [m['name'] for m in result['models']]
    assert names == ['dense', 'pruned', 'merged']
    for model in result['models']:
        timing = model['timing']
        assert len(timing['seconds']) == 2
        assert {
            'median_ms',
            'min_ms',
            'max_ms',
            'q1_ms',
            'q3_ms',
            'throughput',
        } <= set(timing)
        assert {
            'median',
            'paired',
            'paired_median',
            'paired_min',
            'paired_max',
            'best',
            'macs',
        } <= set(model['speedup'])
        # Matrix products as traced = the analytic model, in every form.
        assert model['macs']['matmul'] == model['backbone_analytic_macs']
    dense, pruned, merged = result['models']
    assert dense['speedup']['macs'] == 1.0
    assert merged['speedup']['macs'] > pruned['speedup']['macs'] > 1.0
    assert merged['params'] < pruned['params'] < dense['params']
    assert '| merged | HetDPTViT pruned and merged' in markdown
    assert 'vs AnalyticCost' in markdown


#: Page faults of allocating and freeing a 64 MB tensor eight times, in a
#: fresh process (mallopt changes the whole process).
PAGE_FAULTS = """
import resource, sys, torch
if sys.argv[1] == 'keep':  # in the tool's process: the library loaded
    from hetdpt_benchmark.run import keep_freed_memory
    keep_freed_memory()
for _ in range(2):  # the first allocations fault in either case
    torch.ones(16 << 20)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(8):
    torch.ones(16 << 20)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(not glibc_malloc(), reason='glibc only')
def test_keep_freed_memory_stops_page_faults_per_batch():
    faults = {
        mode: int(
            subprocess.run(
                [sys.executable, '-c', PAGE_FAULTS, mode],
                capture_output=True,
                text=True,
                check=True,
                cwd=REPO,
            ).stdout.split()[-1]
        )
        for mode in ('default', 'keep')
    }
    # 64 MB are 16384 pages: glibc maps them afresh for every tensor; a
    # kept heap faults a block in at most when it grows (seen once, in a
    # loaded run), not for every tensor.
    assert faults['default'] >= 8 * 16384
    assert faults['keep'] <= 2 * 16384


def test_keep_freed_memory_option(tool, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(
        'hetdpt_benchmark.run.keep_freed_memory',
        lambda: calls.append('mallopt'),
    )
    out = tmp_path / 'bench.json'
    assert (
        tool.main(
            [
                'backbone',
                '--arch',
                TINY_ARCH,
                '--spec',
                TINY_SPEC,
                '--img-size',
                '32',
                '--batch-size',
                '2',
                '--repeats',
                '1',
                '--warmup',
                '0',
                '--no-macs',
                '--keep-freed-memory',
                '--json',
                str(out),
            ]
        )
        == 0
    )
    assert calls == ['mallopt']
    assert json.loads(out.read_text())['settings']['keep_freed_memory']


def test_upernet_benchmark_reports_amdahl():
    result, markdown = benchmark(
        'upernet',
        arch=TINY_ARCH,
        spec=TINY_SPEC,
        img_size=[32],
        models=['stock', 'merged'],
        profile=3,
    )
    stock, merged = result['models']
    assert stock['description'] == 'mmseg VisionTransformer'
    # The stock ViT's attention runs as bmm: it is counted too.
    assert stock['backbone_macs']['by_operator']['bmm'] > 0
    assert (
        merged['backbone_macs']['matmul'] == merged['backbone_analytic_macs']
    )
    assert merged['macs']['total'] > merged['backbone_macs']['total']
    assert len(merged['profile']) == 3
    (row,) = result['amdahl']
    assert (row['baseline'], row['model']) == ('stock', 'merged')
    assert 0 < row['backbone_share'] < 1
    assert row['bound'] == pytest.approx(
        amdahl_bound(row['backbone_share'], row['backbone_speedup'])
    )
    assert row['fraction_of_bound'] == pytest.approx(
        row['end_to_end_speedup'] / row['bound']
    )
    assert 'Amdahl bound' in markdown and 'backbone only' in markdown


def test_detr_benchmark_with_configs_and_per_model_options():
    """The real configs, with the backbone shrunk and made random through
    --cfg-options (NAME: prefixes reach one model only)."""
    spec = json.dumps(MIXED_SPEC)
    tiny = [
        'model.backbone.init_cfg=None',
        'model.backbone.arch=deit-tiny',
        'model.neck.in_channels=[192]',
        f'merged:model.backbone.prune_spec={spec}',
        'merged:model.backbone.merged=true',
    ]
    result, _ = benchmark(
        'detr',
        config=[
            f'dense={REPO / "configs/detr_deit_b_dense.py"}',
            f'merged={REPO / "configs/detr_hetdpt_deit_b.py"}',
        ],
        img_size=[32, 48],
        cfg_options=tiny,
    )
    dense, merged = result['models']
    assert dense['description'] == 'HetDPTViT dense'
    assert 'attn 0,3,7,8,11 / act 2,7,8,10,11' in merged['description']
    assert merged['backbone_params'] < dense['backbone_params']
    assert (
        dense['params'] - dense['backbone_params']
        == merged['params'] - merged['backbone_params']
    )
    assert result['settings']['configs']['merged'].endswith(
        'detr_hetdpt_deit_b.py'
    )


def test_existing_output_is_kept_without_force(tool, tmp_path, capsys):
    out = tmp_path / 'result.json'
    out.write_text('keep me')
    code = tool.main(
        [
            'backbone',
            '--arch',
            TINY_ARCH,
            '--spec',
            TINY_SPEC,
            '--json',
            str(out),
        ]
    )
    assert code == 2
    assert 'already exists' in capsys.readouterr().err
    assert out.read_text() == 'keep me'


@pytest.mark.parametrize(
    'args, message',
    [
        (['backbone', '--arch', TINY_ARCH], 'give its --spec'),
        (
            [
                'backbone',
                '--arch',
                TINY_ARCH,
                '--spec',
                '{"attn_removed": [7]}',
            ],
            'out of range',
        ),
        (['backbone', '--spec', 'not json'], '--spec'),
        (
            ['backbone', '--models', 'dense', 'stock'],
            "unknown models ['stock']",
        ),
        (['detr', '--config', 'dense=missing.py'], 'no such file'),
        (['detr', '--config', 'nameless'], 'NAME=PATH'),
        (['upernet', '--img-size', '1', '2', '3'], 'H or H W'),
    ],
)
def test_bad_arguments_are_rejected(tool, capsys, args, message):
    assert tool.main(args) == 2
    assert message in capsys.readouterr().err


#: Blocks of all four kinds in TINY_ARCH's 4 blocks.
MIXED_SPEC_4 = {'attn_removed': [0, 3], 'act_removed': [1, 3]}


def write_backbone_checkpoint(path, spec, form):
    """A tiny ViT backbone checkpoint of ``form`` with its HetDPT record
    (random weights)."""
    model = build_backbone_variants(
        json.loads(TINY_ARCH), spec, variants=(form,), img_size=32
    )[form]
    randomize_(model)
    torch.save(
        dict(
            state_dict={
                f'backbone.{k}': v for k, v in model.state_dict().items()
            },
            meta=dict(hetdpt=model.record().to_dict()),
        ),
        path,
    )
    return model


def test_checkpoints_side_by_side(tmp_path):
    """Several checkpoints in one run: each in its deployable form (a
    pruned file merged), after the first one's dense form, all timed in
    the same rotation; the report gives each model's ratio to the dense
    baseline and to its MACs ratio."""
    deep = write_backbone_checkpoint(
        tmp_path / 'deep.pth', MIXED_SPEC_4, 'merged'
    )
    light = write_backbone_checkpoint(
        tmp_path / 'light.pth',
        {'attn_removed': [2], 'act_removed': [0]},
        'pruned',
    )
    result, markdown = benchmark(
        'backbone',
        models=['dense'],
        img_size=[32],
        batch_size=2,
        threads=1,
        checkpoints=[
            f'deep={tmp_path / "deep.pth"}',
            str(tmp_path / 'light.pth'),
        ],
    )
    assert result['baseline'] == 'dense'
    assert result['settings']['checkpoints'] == {
        'deep': str(tmp_path / 'deep.pth'),
        'light': str(tmp_path / 'light.pth'),
    }
    dense, first, second = result['models']
    assert [m['name'] for m in result['models']] == ['dense', 'deep', 'light']
    assert dense['description'] == 'HetDPTViT dense'
    assert first['description'] == (
        'HetDPTViT pruned and merged (attn 0,3 / act 1,3)'
    )
    assert second['description'] == (
        'HetDPTViT pruned and merged (attn 2 / act 0)'
    )
    assert first['params'] == count_params(deep)
    assert second['params'] == count_params(light.to_merged())
    assert dense['params'] == count_params(
        HetDPTViT(arch=json.loads(TINY_ARCH), img_size=32)
    )
    for model in result['models']:
        assert len(model['timing']['seconds']) == 2
        gain = model['speedup']
        assert gain['of_macs'] == pytest.approx(gain['median'] / gain['macs'])
        assert model['macs']['matmul'] == model['backbone_analytic_macs']
    assert dense['speedup']['macs'] == 1.0
    assert first['speedup']['macs'] > second['speedup']['macs'] > 1.0
    assert 'speedup / MACs ratio |' in markdown
    row = next(
        line for line in markdown.splitlines() if line.startswith('| deep |')
    )
    assert row.endswith(
        f'| {first["speedup"]["macs"]:.3f}x | '
        f'{100 * first["speedup"]["of_macs"]:.1f} % |'
    )


def test_one_unnamed_checkpoint_keeps_its_forms(tmp_path):
    write_backbone_checkpoint(tmp_path / 'one.pth', MIXED_SPEC_4, 'pruned')
    options = resolve_options(
        BenchmarkOptions('backbone', checkpoints=[str(tmp_path / 'one.pth')])
    )
    assert options.checkpoint == str(tmp_path / 'one.pth')
    assert options.checkpoints == ()
    assert options.models == ['dense', 'pruned', 'merged']
    named = resolve_options(
        BenchmarkOptions(
            'backbone', checkpoints=[f'mine={tmp_path / "one.pth"}']
        )
    )
    assert named.checkpoints == [('mine', str(tmp_path / 'one.pth'))]
    assert named.models == ['mine'] and named.spec is None


@pytest.mark.parametrize(
    'args, message',
    [
        (
            ['--checkpoint', '{0}', '--checkpoint', '{0}'],
            'names must be unique',
        ),
        (
            [
                '--checkpoint',
                'a={0}',
                '--checkpoint',
                'b={0}',
                '--models',
                'merged',
            ],
            'takes only dense',
        ),
        (
            ['--checkpoint', 'a={0}', '--checkpoint', 'b=missing.pth'],
            'no such file',
        ),
    ],
)
def test_bad_side_by_side_arguments(tool, capsys, tmp_path, args, message):
    write_backbone_checkpoint(tmp_path / 'one.pth', MIXED_SPEC_4, 'merged')
    args = [arg.format(tmp_path / 'one.pth') for arg in args]
    assert tool.main(['backbone'] + args) == 2
    assert message in capsys.readouterr().err
