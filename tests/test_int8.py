"""INT8 deployment (hetdpt_mm.deploy.quantize / .evaluate, tools/export.py
--int8, tools/test.py on an exported graph, tools/benchmark.py's INT8
runtimes): tiny networks, a few calibration images, no timed assertions."""

import contextlib
import io
import json
from pathlib import Path

import onnx
import pytest
import torch
from helpers import REPO, load_tool, randomize_
from mmengine.config import Config

from hetdpt_demo.data import (
    make_classification,
    make_detection,
    make_segmentation,
)
from hetdpt_mm import META_KEY
from hetdpt_mm.deploy import export as export_module
from hetdpt_mm.deploy.networks import (
    build_from_config,
)
from hetdpt_mm.deploy.quantize import fp32_nodes, node_modules

pytestmark = pytest.mark.usefixtures('one_thread')

DEMO = REPO / 'configs' / 'demo'
# Blocks 1 and 3 keep their attention; 1 and 2 lose their GELU (block 1
# keeps both: one merged FFN with attention, one without).
SPEC = dict(attn_removed=[0, 2], act_removed=[1, 2])
CLASSIFIER = """
_base_ = [{base!r}]
model = dict(
    backbone=dict(arch=dict(embed_dims=48, num_layers=4, num_heads=2),
                  patch_size=8, prune_spec={spec}),
    head=dict(in_channels=48))
data_root = {root!r}
train_dataloader = dict(dataset=dict(data_root=data_root))
val_dataloader = dict(dataset=dict(data_root=data_root, indices=32))
test_dataloader = val_dataloader
"""


def save_merged(cfg: Config, path: Path, seed: int = 0) -> Path:
    """A checkpoint of ``cfg``'s model, its backbone merged, random
    weights."""
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
    root = tmp_path_factory.mktemp('int8')
    make_classification(root / 'cls')
    config = root / 'classifier.py'
    config.write_text(
        CLASSIFIER.format(
            base=str(DEMO / 'vit-demo_digits.py'),
            spec=SPEC,
            root=str(root / 'cls'),
        )
    )
    return config, save_merged(Config.fromfile(config), root / 'merged.pth')


def export_int8(config, checkpoint, out, *extra):
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        status = load_tool('export').main(
            [
                'classifier',
                str(config),
                str(checkpoint),
                '--out',
                str(out),
                '--img-size',
                '32',
                '32',
                '--int8',
                '--calib-images',
                '4',
                *extra,
            ]
        )
    return status, printed.getvalue()


@pytest.fixture(scope='module')
def int8_files(classifier, tmp_path_factory):
    out = tmp_path_factory.mktemp('out') / 'cls.onnx'
    status, printed = export_int8(
        *classifier, out, '--runtimes', 'onnxruntime', 'openvino'
    )
    return status, out, printed


def test_fp32_groups_find_their_products(int8_files):
    """2 attention blocks: 4 products of two activations; 2 merged FFNs
    (one D x D linear each); one patch-embedding convolution; the head's
    Gemm is outside the backbone."""
    classifier_graph = onnx.load(int8_files[1])
    ops = {n.name: n.op_type for n in classifier_graph.graph.node}

    def kept(*groups, scope='network'):
        return fp32_nodes(classifier_graph, groups, scope)

    assert kept() == []
    assert [ops[n] for n in kept('patch_embed')] == ['Conv']
    assert len(kept('attention_products')) == 4
    assert len(kept('merged_ffn')) == 2
    assert [ops[n] for n in kept('merged_ffn')] == ['MatMul', 'MatMul']
    assert [ops[n] for n in kept(scope='backbone')] == ['Gemm']


def test_export_int8_writes_and_verifies_both_runtimes(int8_files):
    status, out, printed = int8_files
    assert status == 0
    folder = out.parent
    assert sorted(p.name for p in folder.iterdir()) == [
        'cls.int8.bin',
        'cls.int8.onnx',
        'cls.int8.xml',
        'cls.onnx',
    ]
    assert 'calibrating on 4 train images' in printed
    rows = [
        line.split(' | ')[:2]
        for line in printed.splitlines()
        if line.startswith(('| onnxruntime', '| openvino'))
        and 'accuracy' not in line
        and 'x3x32x32' not in line
    ]
    assert rows == [
        ['| onnxruntime', 'fp32'],
        ['| onnxruntime', 'int8'],
        ['| openvino', 'int8'],
    ]
    # QDQ: the products with weights take quantized inputs, the attention
    # products (two activations) stay FP32 by default.
    graph = onnx.load(folder / 'cls.int8.onnx')
    dequantized = {
        n.output[0]
        for n in graph.graph.node
        if n.op_type == 'DequantizeLinear'
    }
    products = {
        n.name: bool(dequantized & set(n.input))
        for n in graph.graph.node
        if n.op_type in ('MatMul', 'Gemm', 'Conv')
    }
    attention = fp32_nodes(onnx.load(out), ['attention_products'])
    assert len(attention) == 4
    assert products == {name: name not in attention for name in products}
    assert 'FakeQuantize' in (folder / 'cls.int8.xml').read_text()


def test_tools_test_evaluates_an_exported_graph(
    classifier, int8_files, tmp_path
):
    """The FP32 graph gives the checkpoint's top-1 (the same predictions),
    the OpenVINO IR the top-1 the export's verification printed."""
    config, checkpoint = classifier
    status, out, printed = int8_files
    tool = load_tool('test')

    def top1(path):
        metrics = tmp_path / 'metrics.json'
        argv = [str(config), str(path), '--work-dir', str(tmp_path)]
        assert tool.main(argv + ['--out-metrics', str(metrics)]) == 0
        return json.loads(metrics.read_text())['accuracy/top1']

    assert top1(out) == top1(checkpoint)
    verified = next(
        line.split(' | ')[3]
        for line in printed.splitlines()
        if line.startswith('| openvino | int8 |')
    )
    assert f'{top1(out.with_name("cls.int8.xml")):.2f}' == verified


def test_a_metric_drop_above_max_drop_fails_and_writes_nothing(
    classifier, tmp_path, monkeypatch, capsys
):
    values = iter([90.0, 80.0])
    monkeypatch.setattr(
        export_module, 'metric_points', lambda *args: next(values)
    )
    status, printed = export_int8(*classifier, tmp_path / 'cls.onnx')
    assert status == 1
    assert '| onnxruntime | int8 |' in printed and '-10.00' in printed
    assert 'max-drop' in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    'argv, message',
    [
        (['backbone', '--int8'], 'no metric'),
        (
            ['classifier', '--int8', '--calib-split', 'calib'],
            'calib_dataloader',
        ),
        (['classifier', '--int8', '--keep-fp32', 'softmax'], 'invalid choice'),
    ],
)
def test_int8_usage_errors(classifier, argv, message, tmp_path, capsys):
    task, *rest = argv
    config, checkpoint = classifier
    args = [
        task,
        str(config),
        str(checkpoint),
        '--out',
        str(tmp_path / 'x.onnx'),
    ]
    assert (
        load_tool('export').main(args + ['--img-size', '32', '32', *rest]) == 2
    )
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    'task, name, size, make',
    [
        ('detr', 'detr_hetdpt_demo', 48, make_detection),
        ('upernet', 'upernet_hetdpt_demo', 64, make_segmentation),
    ],
)
def test_dense_prediction_backbones_export_in_int8(
    task, name, size, make, tmp_path
):
    """DETR and UperNet with their backbone in INT8 (the neck and heads
    FP32), verified with mAP / mIoU on a few images: random weights, so
    the drop is not the point (--max-drop 100)."""
    root = tmp_path / 'data'
    make(root, num_train=4, num_val=4, size=(size, size))
    options = {
        f'{split}_dataloader.dataset.data_root': f'{root}/'
        for split in ('train', 'val', 'test')
    }
    if task == 'detr':
        ann = f'{root}/annotations/instances_val2017.json'
        options.update(
            {'val_evaluator.ann_file': ann, 'test_evaluator.ann_file': ann}
        )
    cfg = Config.fromfile(DEMO / f'{name}.py')
    cfg.model.backbone.prune_spec = dict(
        attn_removed=[0, 3], act_removed=[2, 4]
    )
    checkpoint = save_merged(cfg, tmp_path / 'merged.pth')
    out = tmp_path / f'{task}.onnx'
    assert (
        load_tool('export').main(
            [
                task,
                str(DEMO / f'{name}.py'),
                str(checkpoint),
                '--out',
                str(out),
                '--img-size',
                str(size),
                str(size),
                '--static-hw',
                '--verify-batch-sizes',
                '1',
                '--int8',
                '--calib-images',
                '2',
                '--int8-scope',
                'backbone',
                '--max-drop',
                '100',
                '--cfg-options',
                *(f'{k}={v}' for k, v in options.items()),
            ]
        )
        == 0
    )
    graph = onnx.load(tmp_path / f'{task}.int8.onnx')
    dequantized = {
        n.output[0]
        for n in graph.graph.node
        if n.op_type == 'DequantizeLinear'
    }
    kinds = {
        (
            any(path.endswith('backbone') for path, _ in node_modules(n)),
            bool(dequantized & set(n.input)),
        )
        for n in graph.graph.node
        if n.op_type in ('MatMul', 'Gemm', 'Conv')
        and constant_weight(graph, n)
    }
    # Products with weights: quantized in the backbone, FP32 elsewhere.
    assert kinds == {(True, True), (False, False)}


def constant_weight(graph, node) -> bool:
    """Whether a product's second operand is a weight (in the QDQ graph: the
    dequantized or plain initializer)."""
    weights = {t.name for t in graph.graph.initializer}
    weights |= {
        n.output[0]
        for n in graph.graph.node
        if n.op_type == 'DequantizeLinear' and n.input[0] in weights
    }
    return node.input[1] in weights


def test_benchmark_times_int8_beside_fp32(tmp_path):
    out = tmp_path / 'bench.json'
    assert (
        load_tool('benchmark').main(
            [
                'backbone',
                '--arch',
                json.dumps(dict(embed_dims=48, num_layers=2, num_heads=2)),
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
                'onnxruntime',
                'onnxruntime-int8',
                'openvino',
                'openvino-int8',
                '--repeats',
                '2',
                '--warmup',
                '0',
                '--json',
                str(out),
                '--md',
                str(tmp_path / 'bench.md'),
            ]
        )
        == 0
    )
    result = json.loads(out.read_text())
    assert [(r['runtime'], r['model']) for r in result['int8']] == [
        ('onnxruntime', 'dense'),
        ('onnxruntime', 'merged'),
        ('openvino', 'dense'),
        ('openvino', 'merged'),
    ]
    merged = result['int8'][1]
    assert merged['vs_baseline_int8']['macs'] > 1
    assert (
        'vs_baseline_fp32' in merged
        and 'vs_baseline_int8' not in (result['int8'][0])
    )
    models = {m['name']: m for m in result['models']}
    assert 0 < models['merged@openvino-int8']['max_abs_diff'] <= 1.0
    assert '| onnxruntime | merged |' in (tmp_path / 'bench.md').read_text()


def test_benchmark_int8_runs_its_other_operations_in_fp32(capsys):
    argv = ['backbone', '--runtime', 'openvino-int8', '--dtype', 'bf16']
    assert load_tool('benchmark').main(argv) == 2
    assert 'openvino-int8 runs the exported graph in fp32' in (
        capsys.readouterr().err
    )
