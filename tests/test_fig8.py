"""The demo's Fig. 8: the reading (hetdpt_demo/tome_claims.py) on synthetic
curves -- the monotone envelope, and the throughput ratio at equal accuracy
and at equal accuracy drop by interpolation along each envelope -- and the
token-merging stage's evaluation and timing of its points on tiny random
classifiers."""

import dataclasses
import json
from types import SimpleNamespace

import pytest
import torch
from helpers import DENSE_CONFIG, REPO, load_tool
from mmengine.config import Config

from hetdpt_demo.data import SHAPES_TASK, make_pairs
from hetdpt_demo.results import CurvePoint
from hetdpt_demo.settings import CLS_CLASSES, CLS_PATCH_SIZE, FULL
from hetdpt_demo.stages_tome import TomeStages
from hetdpt_demo.tome_claims import envelope, fig8_method, throughput_at
from hetdpt_mm.deploy.networks import build_from_config


def curve(model, method, pairs):
    return [
        CurvePoint(model, method, f'p{i}', accuracy, throughput, 1)
        for i, (accuracy, throughput) in enumerate(pairs)
    ]


#: Dense 90 % at 1000 img/s down to 84 % at 2000; HetDPT 89 % at 1500 down
#: to 83 % at 3000; each with one noisy point another of its own beats.
DENSE = curve(
    'dense',
    'tome',
    [(90, 1000), (88, 1100), (89, 1200), (87, 1500), (84, 2000)],
)
HETDPT = curve(
    'hetdpt',
    'tome',
    [(89, 1500), (88, 1800), (85, 1700), (86, 2400), (83, 3000)],
)


def test_the_envelope_drops_beaten_points_and_duplicates():
    twin = CurvePoint('dense', 'tome', 'twin', 90, 1000, 1)
    front = envelope(DENSE + [twin])
    assert [(p.accuracy, p.throughput) for p in front] == [
        (90, 1000),
        (89, 1200),
        (87, 1500),
        (84, 2000),
    ]
    assert front[0] is DENSE[0]  # of two equal points, the first stays


def test_throughput_is_interpolated_along_the_envelope_only_inside_it():
    front = envelope(DENSE)
    assert throughput_at(front, 88) == pytest.approx(1350)
    assert throughput_at(front, 86) == pytest.approx(1500 + 500 / 3)
    assert throughput_at(front, 90) == 1000
    assert throughput_at(front, 90.5) is None
    assert throughput_at(front, 83.9) is None


def test_ratios_at_equal_accuracy_and_at_equal_drop():
    gtp = curve('dense', 'gtp', [(90, 5000)])  # another method: not read
    reading = fig8_method(
        'tome', DENSE + HETDPT + gtp, dict(dense=90, hetdpt=89)
    )
    assert [(row.level, row.ratio) for row in reading.equal_accuracy] == [
        (89, pytest.approx(1500 / 1200)),
        (88, pytest.approx(1800 / 1350)),
        (87, pytest.approx(2100 / 1500)),
        (86, pytest.approx(2400 / (1500 + 500 / 3))),
        (84, pytest.approx(2800 / 2000)),
    ]  # 90 % and 83 %: one curve does not reach them
    assert [(row.level, row.ratio) for row in reading.equal_drop] == [
        (0, 1.5),
        (1, 1.5),
        (3, 1.6),
        (6, 1.5),
    ]
    at = reading.at_paper_drop
    assert (at.level, at.dense_throughput, at.hetdpt_throughput) == (
        0.9,
        pytest.approx(1180),
        pytest.approx(1770),
    )
    assert at.ratio == pytest.approx(1.5)
    assert [p.setting for p in reading.envelopes['hetdpt']] == [
        'p0',
        'p1',
        'p3',
        'p4',
    ]


def test_curves_that_share_no_accuracy_give_no_ratio():
    far = curve('hetdpt', 'tome', [(50, 9000), (40, 9900)])
    reading = fig8_method('tome', DENSE + far, dict(dense=90, hetdpt=50))
    assert reading.equal_accuracy == []
    assert [row.level for row in reading.equal_drop] == [0, 1, 3, 6]
    assert reading.at_paper_drop is not None


@pytest.fixture(scope='module')
def tiny_stage(tmp_path_factory, one_thread):
    """The token-merging stage's methods on random dense and merged
    (attention removed in blocks 1 and 3) demo classifiers and 40 val
    images of the shapes task."""
    root = tmp_path_factory.mktemp('fig8')
    make_pairs(root / 'shapes', **dict(SHAPES_TASK, num_train=4, num_val=40))
    options = (
        [f'model.backbone.patch_size={CLS_PATCH_SIZE}']
        + [
            f'{loader}.dataset.data_root={root}/shapes'
            for loader in (
                'train_dataloader',
                'val_dataloader',
                'test_dataloader',
            )
        ]
        + [f'model.head.num_classes={CLS_CLASSES}']
    )
    checkpoints = {}
    for name, merged in (('dense', {}), ('MAP', MERGED)):
        cfg = Config.fromfile(DENSE_CONFIG)
        cfg.model.backbone.update(patch_size=CLS_PATCH_SIZE, **merged)
        cfg.model.head.num_classes = CLS_CLASSES
        torch.manual_seed(1)
        model = build_from_config(cfg)
        model.init_weights()
        checkpoints[name] = str(root / f'{name}.pth')
        torch.save(dict(state_dict=model.state_dict()), checkpoints[name])
    checkpoints['attention_only'] = checkpoints['MAP']

    class Stage(TomeStages):
        repo = REPO
        options = SimpleNamespace(threads=1)
        settings = dataclasses.replace(FULL, bench_batch=4, bench_repeats=1)
        logger = 'current'
        results = SimpleNamespace(
            dense=SimpleNamespace(arch=dict(img_size=[32, 32]))
        )

        def data_options(self, kind):
            return options

    return Stage(), checkpoints, options, root


MERGED = dict(prune_spec=dict(depth=6, attn_removed=[1, 3]), merged=True)


def test_the_stage_evaluates_every_point_as_tools_test_does(tiny_stage):
    stage, checkpoints, options, root = tiny_stage
    points = {
        'dense': ('dense', {}),
        'hetdpt-r2-inflect-1': (
            'MAP',
            dict(token_merge=dict(r=2, inflect=-1)),
        ),
        'hetdpt-gtp3': ('MAP', dict(graph_propagation=dict(num_prop=3))),
    }
    accuracy = stage.evaluate_classifiers(checkpoints, points)
    for name, (source, backbone) in points.items():
        out = root / f'{name}.json'
        extra = [
            f'model.backbone.{option}.{key}={value}'
            for option, args in backbone.items()
            for key, value in args.items()
        ]
        load_tool('test').main(
            [
                str(DENSE_CONFIG),
                checkpoints[source],
                '--work-dir',
                str(root / name),
                '--out-metrics',
                str(out),
                '--cfg-options',
                *options,
                *extra,
            ]
        )
        assert accuracy[name] == pytest.approx(
            json.loads(out.read_text())['accuracy/top1']
        )
    timing = stage.time_tome_backbones(checkpoints, points)['points']
    assert set(timing) == set(points)
    # GTP-ViT removes patches: fewer MACs than the model without it.
    assert timing['hetdpt-gtp3']['macs'] < timing['dense']['macs']
