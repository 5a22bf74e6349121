"""ONNX export (tools/export.py, hetdpt_mm.deploy) and the runtimes of
tools/benchmark.py --runtime: every exported graph is verified against
PyTorch in ONNX Runtime (and OpenVINO) at several sizes, within 1e-4."""

import contextlib
import ctypes
import gc
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn
from helpers import REPO, load_tool, randomize_
from mmengine.config import Config

from hetdpt_benchmark.runtimes import TOLERANCES, checked_diff
from hetdpt_mm import META_KEY
from hetdpt_mm.deploy import export, networks
from hetdpt_mm.deploy.networks import (
    AdaptiveAvgPool2dExport,
    build_from_config,
)
from hetdpt_mm.deploy.runtimes import _SignalStack, make_session

DEMO = REPO / 'configs' / 'demo'
DEMO_SPEC = dict(attn_removed=[0, 3, 4], act_removed=[2, 4, 5])
# A DeiT-tiny-wide classifier, 4 blocks deep to keep the exports quick.
CLASSIFIER_CONFIG = f"""
_base_ = [{str(DEMO / 'vit-demo_digits.py')!r}]
model = dict(
    backbone=dict(arch=dict(embed_dims=192, num_layers=4, num_heads=3),
                  img_size=224, patch_size=16),
    head=dict(in_channels=192))
"""


@pytest.fixture(scope='module')
def export_tool():
    return load_tool('export')


def save_merged(cfg: Config, path: Path, seed: int = 0) -> Path:
    """A checkpoint of ``cfg``'s model with a merged backbone of random
    weights; its record says the structure."""
    cfg.model.backbone.init_cfg = None
    model = randomize_(build_from_config(cfg), seed)
    model.backbone = model.backbone.to_merged()
    torch.save(
        dict(
            state_dict=model.state_dict(),
            meta={META_KEY: model.backbone.record().to_dict()},
        ),
        path,
    )
    return path


@pytest.fixture(scope='module')
def classifier(tmp_path_factory):
    root = tmp_path_factory.mktemp('classifier')
    config = root / 'classifier.py'
    config.write_text(CLASSIFIER_CONFIG)
    cfg = Config.fromfile(config)
    cfg.model.backbone.prune_spec = dict(attn_removed=[1], act_removed=[1, 3])
    return config, save_merged(cfg, root / 'merged.pth')


@pytest.fixture(scope='module')
def classifier_onnx(export_tool, classifier, tmp_path_factory):
    config, checkpoint = classifier
    out = tmp_path_factory.mktemp('onnx') / 'classifier.onnx'
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        status = export_tool.main(
            [
                'classifier',
                str(config),
                str(checkpoint),
                '--out',
                str(out),
                '--static-hw',
                '--verify-batch-sizes',
                '1',
                '3',
                '--runtimes',
                'onnxruntime',
                'openvino',
            ]
        )
    return status, out, printed.getvalue()


def checked_rows(output, runtimes, inputs):
    """The verification table printed by the tool: every check within the
    tolerance, in every runtime, at every input shape."""
    rows = [
        line.split(' | ')
        for line in output.splitlines()
        if line.startswith('| onnxruntime') or line.startswith('| openvino')
    ]
    assert {(row[0][2:], row[1]) for row in rows} == {
        (runtime, shape) for runtime in runtimes for shape in inputs
    }
    for row in rows:
        assert float(row[3]) <= 1e-4 and row[4].startswith('yes')


def test_classifier_exports_with_dynamic_batch(classifier_onnx):
    status, out, output = classifier_onnx
    assert status == 0 and out.is_file()
    checked_rows(
        output, ('onnxruntime', 'openvino'), ('1x3x224x224', '3x3x224x224')
    )
    assert 'at opset 18' in output and 'dynamic batch\n' in output


def test_backbone_exports_with_dynamic_size(
    export_tool, classifier, tmp_path, capsys
):
    config, checkpoint = classifier
    out = tmp_path / 'backbone.onnx'
    assert (
        export_tool.main(
            [
                'backbone',
                str(config),
                str(checkpoint),
                '--out',
                str(out),
                '--verify-sizes',
                '320',
                '256',
                '--verify-batch-sizes',
                '1',
                '3',
            ]
        )
        == 0
    )
    checked_rows(
        capsys.readouterr().out,
        ('onnxruntime',),
        ('1x3x224x224', '3x3x224x224', '1x3x320x256', '3x3x320x256'),
    )


def demo_checkpoint(name: str, path: Path) -> Path:
    cfg = Config.fromfile(DEMO / f'{name}.py')
    cfg.model.backbone.prune_spec = DEMO_SPEC
    return save_merged(cfg, path)


@pytest.mark.parametrize(
    'task, name, sizes',
    [
        ('detr', 'detr_hetdpt_demo', ((48, 48), (64, 80))),
        ('upernet', 'upernet_hetdpt_demo', ((64, 64), (96, 72))),
    ],
)
def test_dense_prediction_exports_at_two_sizes(
    export_tool, task, name, sizes, tmp_path, capsys
):
    checkpoint = demo_checkpoint(name, tmp_path / 'merged.pth')
    (height, width), (other_h, other_w) = sizes
    assert (
        export_tool.main(
            [
                task,
                str(DEMO / f'{name}.py'),
                str(checkpoint),
                '--out',
                str(tmp_path / f'{task}.onnx'),
                '--img-size',
                str(height),
                str(width),
                '--verify-sizes',
                str(other_h),
                str(other_w),
                '--verify-batch-sizes',
                '2',
            ]
        )
        == 0
    )
    checked_rows(
        capsys.readouterr().out,
        ('onnxruntime',),
        (f'2x3x{height}x{width}', f'2x3x{other_h}x{other_w}'),
    )


def test_a_difference_above_the_tolerance_fails_and_writes_nothing(
    export_tool, classifier, classifier_onnx, tmp_path, monkeypatch, capsys
):
    """The graph of one checkpoint checked against another's weights."""
    config, _ = classifier
    cfg = Config.fromfile(config)
    cfg.model.backbone.prune_spec = dict(attn_removed=[1], act_removed=[1, 3])
    other = save_merged(cfg, tmp_path / 'other.pth', seed=1)
    monkeypatch.setattr(
        'hetdpt_mm.deploy.export.export_onnx',
        lambda net, example, path, *args, **kwargs: shutil.copy(
            classifier_onnx[1], path
        ),
    )
    out = tmp_path / 'bad.onnx'
    assert (
        export_tool.main(
            [
                'classifier',
                str(config),
                str(other),
                '--out',
                str(out),
                '--static-hw',
            ]
        )
        == 1
    )
    assert 'differ from PyTorch' in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == [other]


def cpu_has_bf16() -> bool:
    import openvino

    return 'BF16' in openvino.Core().get_property(
        'CPU', 'OPTIMIZATION_CAPABILITIES'
    )


@pytest.mark.skipif(not cpu_has_bf16(), reason='the CPU has no bf16')
def test_benchmark_runs_openvino_and_torch_in_bf16(tmp_path):
    """bf16 rows differ from fp32 PyTorch by bf16 rounding: more than fp32
    rounding, within the bf16 tolerance."""
    out = tmp_path / 'bench.json'
    assert (
        load_tool('benchmark').main(
            [
                'backbone',
                '--arch',
                json.dumps(dict(embed_dims=64, num_layers=2, num_heads=2)),
                '--spec',
                json.dumps(dict(attn_removed=[0], act_removed=[1])),
                '--img-size',
                '32',
                '--batch-size',
                '2',
                '--models',
                'merged',
                '--runtime',
                'torch',
                'openvino',
                '--dtype',
                'bf16',
                '--repeats',
                '1',
                '--no-macs',
                '--json',
                str(out),
            ]
        )
        == 0
    )
    result = json.loads(out.read_text())
    assert result['settings']['dtype'] == 'bf16'
    diffs = {m['name']: m.get('max_abs_diff') for m in result['models']}
    assert 0 < diffs['merged'] <= TOLERANCES['bf16']
    assert 1e-4 < diffs['merged@openvino'] <= TOLERANCES['bf16']


def test_benchmark_refuses_a_runtime_outside_the_tolerance():
    images = torch.zeros(1, 3, 8, 8)
    with pytest.raises(ValueError, match='differs from PyTorch eager in fp32'):
        checked_diff([images + 1e-3], [images], 'openvino', 'merged', 'fp32')
    assert checked_diff(
        [images + 1e-3], [images], 'openvino', 'merged', 'bf16'
    ) == pytest.approx(1e-3)


@pytest.mark.parametrize(
    'args, message',
    [
        (
            ['--verify-sizes', '8', '8'],
            'input size 8x8: a 8x8 input',
        ),
        (
            ['--static-hw', '--verify-sizes', '320', '256'],
            '--static-hw',
        ),
        (['--batch-size', '1'], 'must be >= 2'),
    ],
)
def test_bad_input_is_reported_before_anything_is_written(
    export_tool, classifier, tmp_path, capsys, args, message
):
    config, checkpoint = classifier
    out = tmp_path / 'model.onnx'
    assert (
        export_tool.main(
            [
                'backbone',
                str(config),
                str(checkpoint),
                '--out',
                str(out),
                *args,
            ]
        )
        == 2
    )
    assert message in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    'task, options, refusal',
    [
        ('classifier', ['token_merge.r=16'], 'merges tokens (token_merge)'),
        (
            'classifier',
            ['graph_propagation.num_prop=20'],
            'propagates tokens (graph_propagation)',
        ),
        # Featmaps unmerge the propagated tokens onto the grid.
        (
            'backbone',
            ['graph_propagation.num_prop=20', 'out_type=featmap'],
            'propagates tokens (graph_propagation)',
        ),
    ],
)
def test_a_token_merging_backbone_exports_at_a_fixed_size(
    export_tool, classifier, tmp_path, capsys, task, options, refusal
):
    """ToMe merges a number of tokens fixed by the input size (GTP-ViT
    propagates a number capped by it): the graph is exported and verified
    for one height and width (any batch), and dynamic height and width are
    refused before anything is written."""
    config, checkpoint = classifier
    out = tmp_path / 'model.onnx'
    merging = ['--cfg-options'] + [f'model.backbone.{o}' for o in options]
    assert (
        export_tool.main(
            [
                task,
                str(config),
                str(checkpoint),
                '--out',
                str(out),
                *merging,
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.startswith(f'error: the backbone {refusal}')
    assert 'add --static-hw' in err
    assert not out.exists()
    assert (
        export_tool.main(
            [
                task,
                str(config),
                str(checkpoint),
                '--out',
                str(out),
                '--static-hw',
                '--runtimes',
                'onnxruntime',
                'openvino',
                *merging,
            ]
        )
        == 0
    )
    checked_rows(
        capsys.readouterr().out,
        ('onnxruntime', 'openvino'),
        ('1x3x224x224', '3x3x224x224'),
    )
    assert out.is_file()


def test_wrong_toolbox_and_existing_output(
    export_tool, classifier, tmp_path, capsys
):
    config, checkpoint = classifier
    assert (
        export_tool.main(
            [
                'detr',
                str(config),
                str(checkpoint),
                '--out',
                str(tmp_path / 'x.onnx'),
            ]
        )
        == 2
    )
    assert 'task detr needs a mmdet config' in capsys.readouterr().err
    existing = tmp_path / 'existing.onnx'
    existing.write_text('keep')
    assert (
        export_tool.main(
            [
                'classifier',
                str(config),
                str(checkpoint),
                '--out',
                str(existing),
            ]
        )
        == 2
    )
    assert 'already exists' in capsys.readouterr().err
    assert existing.read_text() == 'keep'


def test_a_width_pruned_checkpoint_exports_with_the_dense_config(
    export_tool, classifier, tmp_path, capsys
):
    """A HetDPT+ checkpoint and the config it was pruned from: the head
    takes the embedding width the checkpoint records, as in tools/test.py."""
    from hetdpt_mm.checkpoint.safe_load import load_checkpoint_file
    from hetdpt_mm.pruning.width_checkpoint import prune_width_checkpoint

    config, merged = classifier
    plus, result = prune_width_checkpoint(
        load_checkpoint_file(merged), ratio=0.3, importance='magnitude'
    )
    path = str(tmp_path / 'plus.pth')
    torch.save(plus, path)
    out = tmp_path / 'plus.onnx'
    assert (
        export_tool.main(
            [
                'classifier',
                str(config),
                path,
                '--out',
                str(out),
                '--img-size',
                '32',
                '32',
                '--static-hw',
                '--verify-batch-sizes',
                '1',
            ]
        )
        == 0
    )
    checked_rows(capsys.readouterr().out, ['onnxruntime'], ['1x3x32x32'])
    head = networks.load_model(config, path)[0].head.layers.head
    assert head.in_features == result.record.spec.widths.embed_dims < 192


def test_a_checkpoint_that_does_not_fit_is_named(
    export_tool, classifier, tmp_path, capsys
):
    config, checkpoint = classifier
    out = tmp_path / 'model.onnx'
    assert (
        export_tool.main(
            [
                'classifier',
                str(config),
                str(checkpoint),
                '--out',
                str(out),
                '--cfg-options',
                'model.head.num_classes=5',
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.startswith(f'error: {checkpoint} does not fit {config}')
    assert 'head.layers.head.weight' in err
    assert not out.exists()


@pytest.mark.parametrize('size', [(1, 1), (2, 3), (5, 7), (13, 18), (24, 16)])
def test_exportable_adaptive_pool_is_torchs(size):
    inputs = torch.randn(2, 4, *size)
    for output_size in (1, 2, 3, 6, (2, 5)):
        torch.testing.assert_close(
            AdaptiveAvgPool2dExport(output_size)(inputs),
            nn.AdaptiveAvgPool2d(output_size)(inputs),
        )
    net = networks.exportable(nn.Sequential(nn.AdaptiveAvgPool2d(3)))
    assert isinstance(net[0], AdaptiveAvgPool2dExport)


def signal_stack():
    stack = _SignalStack()
    ctypes.CDLL(None).sigaltstack(None, ctypes.byref(stack))
    return stack.ss_sp, stack.ss_flags, stack.ss_size


def test_openvino_sessions_leave_the_signal_stack_as_it_was(classifier_onnx):
    """Freed in the order they were made, two OpenVINO models would leave
    the thread a freed alternate signal stack (a later SIGCHLD: SIGSEGV)."""
    before = signal_stack()
    first = make_session(classifier_onnx[1], 'openvino')
    second = make_session(classifier_onnx[1], 'openvino')
    del first
    gc.collect()
    del second
    gc.collect()
    assert signal_stack() == before


def test_benchmark_times_every_runtime(tmp_path):
    tool = load_tool('benchmark')
    out = tmp_path / 'bench.json'
    assert (
        tool.main(
            [
                'backbone',
                '--arch',
                json.dumps(dict(embed_dims=64, num_layers=2, num_heads=2)),
                '--spec',
                json.dumps(dict(attn_removed=[0], act_removed=[0, 1])),
                '--img-size',
                '32',
                '--batch-size',
                '2',
                '--models',
                'dense',
                'merged',
                '--runtime',
                'torch',
                'onnxruntime',
                'openvino',
                '--repeats',
                '1',
                '--warmup',
                '1',
                '--no-macs',
                '--json',
                str(out),
            ]
        )
        == 0
    )
    result = json.loads(out.read_text())
    assert [m['name'] for m in result['models']] == [
        'dense',
        'merged',
        'dense@onnxruntime',
        'merged@onnxruntime',
        'dense@openvino',
        'merged@openvino',
    ]
    rows = {row['runtime']: row for row in result['runtimes']}
    assert set(rows) == {'torch', 'onnxruntime', 'openvino'}
    for row in rows.values():
        assert row['max_abs_diff'] <= 1e-4
        assert row['speedup']['paired_median'] > 0
    assert rows['torch']['vs_torch']['paired_median'] == 1


@pytest.mark.parametrize(
    'reduction, described',
    [
        (['--token-merge', '4'], ', ToMe r=4'),
        (['--graph-propagation', '4'], ', GTP-ViT num_prop=4 (mixed graph)'),
    ],
)
def test_benchmark_times_a_token_merging_backbone_in_the_runtimes(
    tmp_path, reduction, described
):
    """The benchmark's graphs are exported at its one input shape, so a
    backbone with ToMe (or GTP-ViT) exports too; each runtime matches
    PyTorch's merging model within 1e-4 (16 patches, 4 merged or
    propagated in each block).  Without --runtime torch the table has no
    speedup over eager PyTorch."""
    out = tmp_path / 'bench.json'
    assert (
        load_tool('benchmark').main(
            [
                'backbone',
                '--arch',
                json.dumps(dict(embed_dims=64, num_layers=2, num_heads=2)),
                '--spec',
                json.dumps(dict(attn_removed=[0], act_removed=[0, 1])),
                '--img-size',
                '64',
                '--batch-size',
                '2',
                '--models',
                'dense',
                'merged',
                '--runtime',
                'onnxruntime',
                'openvino',
                *reduction,
                '--repeats',
                '1',
                '--warmup',
                '0',
                '--no-macs',
                '--json',
                str(out),
            ]
        )
        == 0
    )
    result = json.loads(out.read_text())
    models = {m['name']: m for m in result['models']}
    assert list(models) == [
        'dense@onnxruntime',
        'merged@onnxruntime',
        'dense@openvino',
        'merged@openvino',
    ]
    for model in models.values():
        assert model['description'].endswith(described)
        assert model['max_abs_diff'] <= 1e-4
    # Eager PyTorch was not timed: no speedup over it.
    assert [
        (row['runtime'], row['vs_torch']) for row in result['runtimes']
    ] == [('onnxruntime', None), ('openvino', None)]


@pytest.mark.parametrize(
    'args, message',
    [
        (['detr', '--runtime', 'onnxruntime'], 'for the backbone task'),
        (
            ['backbone', '--runtime', 'onnxruntime', '--dtype', 'bf16'],
            'onnxruntime runs the exported graph in fp32 here',
        ),
        (
            ['backbone', '--runtime', 'openvino', '--dtype', 'fp16'],
            'openvino runs the exported graph in fp32 or bf16 here',
        ),
        (['backbone', '--runtime', 'tensorrt'], 'unknown runtimes'),
    ],
)
def test_benchmark_runtime_usage_errors(args, message, capsys):
    assert load_tool('benchmark').main(args) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize('bad', [float('nan'), float('inf')])
def test_a_nan_in_any_output_fails_verification(monkeypatch, bad):
    """Issue 59 item 7: Python's ``max`` over the outputs' differences
    skipped a NaN in the second output, and the graph passed."""
    expected = [np.zeros((1, 3), np.float32), np.zeros((1, 4), np.float32)]
    got = [expected[0].copy(), expected[1].copy()]
    got[1][0, 2] = bad
    monkeypatch.setattr(
        'hetdpt_mm.deploy.export.make_session',
        lambda path, runtime: lambda inputs: got,
    )
    cases = [dict(inputs=np.zeros((1, 3, 8, 8), np.float32), outputs=expected)]
    (row,) = export.verify(Path('x.onnx'), cases, ['onnxruntime'], 1e-4)
    assert not row['ok']
    tensors = [torch.from_numpy(e) for e in expected]
    with pytest.raises(ValueError, match='differs'):
        checked_diff(
            [torch.from_numpy(g) for g in got], tensors, 'ort', 'm', 'fp32'
        )
