"""MAP over three layer types (issue 61): a windowed ViT's attention in
windows and over the whole map, and its GELUs.  With no point removing a
type, the three-type fit and budget search are the paper's two-type ones,
number for number; the cost-aware budget prices each type by its MACs at
the deployment size; the prune hook removes each type within its own
blocks, and MAP's points files carry the types' counts."""

import csv
import json

import numpy as np
from helpers import REPO, fake_runner, load_tool
from mmengine.registry import DefaultScope
from mmpretrain.registry import MODELS

from hetdpt_mm.hooks import HetDPTPruneHook
from hetdpt_mm.hooks.map_collect_hook import MAPCollectHook
from hetdpt_mm.models import HetDPTWindowedViT
from hetdpt_mm.pruning import (
    TypeCost,
    allocate,
    allocate_types,
    allocate_types_for_speedup,
    fit_map,
    fit_types,
    load_points,
    load_type_points,
)
from hetdpt_mm.pruning.map.points import parse_points
from hetdpt_mm.pruning.schedules import CyclicSchedule
from hetdpt_mm.spec import PruneSpec

TYPES = ('attn_window', 'attn_global', 'act')
SIZES = dict(attn_window=8, attn_global=4, act=12)


def paper_counts():
    """The paper's DeiT-B points (docs/method.md section 2) as removed
    counts at depth 12."""
    return [
        dict(
            n_attn=round(12 * (1 - p.a)),
            n_act=round(12 * (1 - p.t)),
            accuracy=p.accuracy,
        )
        for p in load_points(REPO / 'tests/data/map_points_paper.csv')
    ]


def write(path, rows):
    with open(path, 'w', newline='') as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_three_types_without_global_points_are_the_two_type_map(tmp_path):
    """The paper's points, their attention removals windowed: the same
    degree, CV table and coefficients, bit for bit, and for every budget
    up to SAM-B's 8 windowed blocks the candidates, predictions, hull flags
    and best split."""
    rows = paper_counts()
    two = fit_map(parse_points(rows, depth=12))
    path = write(
        tmp_path / 'points.csv',
        [
            dict(n_attn_window=r['n_attn'], n_act=r['n_act'], accuracy=a)
            for r, a in ((r, r['accuracy']) for r in rows)
        ],
    )
    three = fit_types(load_type_points(path, TYPES, 12), TYPES, 12)
    assert three.fitted == ('attn_window', 'act')
    assert (three.degree, three.coefficients, three.scores) == (
        two.degree,
        two.coefficients,
        two.scores,
    )
    assert three.format_table() == two.format_table()
    for budget in range(9):
        paper = allocate(two, budget, 12)
        ours = allocate_types(three, budget, SIZES)
        assert [
            (c.n_attn, 0, c.n_act, c.predicted_accuracy, c.extrapolated)
            for c in paper.candidates
        ] == [
            (*c.counts, c.predicted_accuracy, c.extrapolated)
            for c in ours.candidates
        ]
        assert ours.best.counts == (paper.n_attn, 0, paper.n_act)


def surface(counts):
    """A smooth accuracy surface of the three retained ratios (global
    attention costly to lose)."""
    w, g, t = (12 - np.asarray(counts, float).T) / 12
    return 30 + 10 * w + 40 * g + 15 * t - 4 * w * t - 10 * g * g


def grid_points():
    counts = [
        (w, g, t) for w in range(0, 5, 2) for g in range(3) for t in range(5)
    ]
    return [
        dict(n_attn_window=w, n_attn_global=g, n_act=t, accuracy=acc)
        for (w, g, t), acc in zip(counts, surface(counts))
    ]


def test_three_type_fit_and_budget_search(tmp_path):
    fit = fit_types(
        load_type_points(write(tmp_path / 'p.csv', grid_points()), TYPES, 12),
        TYPES,
        12,
    )
    assert fit.fitted == TYPES and fit.degree == 2
    counts = [(1, 1, 3), (3, 0, 2)]
    np.testing.assert_allclose(fit.predict(counts), surface(counts))
    allocation = allocate_types(fit, 4, SIZES)
    predicted = [c.predicted_accuracy for c in allocation.candidates]
    assert allocation.best.predicted_accuracy == max(predicted)
    assert allocation.best.counts[1] == 0  # global attention is kept
    assert all(sum(c.counts) == 4 for c in allocation.candidates)
    # Outside the points' hull (5 global removals): flagged.
    assert not fit.in_data_hull([(0, 4, 0)])[0]


def test_cost_aware_budget_prices_global_attention_at_1024(tmp_path):
    """SAM ViT-B: a global attention at 1024² costs several windowed ones
    (4,096 tokens attend to all 4,096); at 224² they cost alike.  The
    speedup-constrained search reaches its target."""
    network = HetDPTWindowedViT(arch='base', img_size=1024)
    types = {t: network.layer_types()[t] for t in TYPES}

    def cost(size):
        macs = network.codec.layer_macs(network.build_args(), (size, size))
        return TypeCost.from_layer_macs(macs, types)

    large, small = cost(1024), cost(224)
    assert large.savings['attn_global'] > 2.5 * large.savings['attn_window']
    assert small.savings['attn_global'] < 1.5 * small.savings['attn_window']
    assert large.speedup(dict(attn_global=1)) > large.speedup(
        dict(attn_window=2)
    )
    points = write(tmp_path / 'p.csv', grid_points())
    fit = fit_types(load_type_points(points, TYPES, 12), TYPES, 12)
    best = allocate_types_for_speedup(fit, SIZES, large, 1.2).best
    assert best.speedup >= 1.2


def tiny_classifier():
    """A classifier on the contract's small windowed ViT, gated."""
    model = dict(
        type='ImageClassifier',
        backbone=dict(
            type='HetDPTWindowedViT',
            **HetDPTWindowedViT.SMALL_ARGS,
            gated=True,
        ),
        neck=dict(type='GlobalAveragePooling'),
        head=dict(type='LinearClsHead', num_classes=10, in_channels=32),
    )
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return MODELS.build(model)


def run_hook(hook, runner):
    hook.before_train(runner)
    for step in range(1, runner.max_iters + 1):
        runner.iter = step - 1
        hook.after_train_iter(runner, step - 1)
    return runner.model.backbone.prune_spec


def test_the_prune_hook_removes_each_type_within_its_blocks():
    runner = fake_runner(tiny_classifier(), max_epochs=4)
    backbone = runner.model.backbone
    for kind in ('attn', 'act'):
        for index, gate in enumerate(backbone.gates(kind)):
            gate.hetdpt_score.data.fill_(float(index))  # lowest: block 0
    hook = HetDPTPruneHook(
        counts=dict(attn_window=2, attn_global=1, act=1), stages=1
    )
    spec = run_hook(hook, runner)
    assert hook.order == ['attn_window', 'act', 'attn_global', 'attn_window']
    # Window blocks 0, 1, 3, 4; global 2, 5: each chosen among its own.
    assert spec.attn_removed == (0, 1, 2) and spec.act_removed == (0,)
    assert [d.get('type') for d in hook.decisions] == hook.order[:1] + [
        None,
        'attn_global',
        'attn_window',
    ]


def test_the_prune_hook_splits_a_budget_by_three_type_map(tmp_path):
    points = write(
        tmp_path / 'points.csv',
        [
            dict(r, n_attn_window=min(r['n_attn_window'], 4))
            for r in grid_points()
        ],
    )
    runner = fake_runner(tiny_classifier(), max_epochs=4)
    hook = HetDPTPruneHook(
        map_points=str(points), budget=3, map_kinds=TYPES, stages=1
    )
    hook.before_train(runner)
    fit = fit_types(load_type_points(points, TYPES, 6), TYPES, 6)
    sizes = dict(attn_window=4, attn_global=2, act=6)
    assert hook.counts == allocate_types(fit, 3, sizes).counts()


def test_collection_schedules_name_layer_types():
    """A collection run may remove one layer type at a time (global
    attention only: points along its axis); it stops where the type's blocks
    run out."""
    schedule = CyclicSchedule(['attn_global', 'act'])
    assert schedule.kinds(3) == ['attn_global', 'act', 'attn_global']
    types = HetDPTWindowedViT(**HetDPTWindowedViT.SMALL_ARGS).layer_types()
    too_many = MAPCollectHook._too_many(
        PruneSpec(6), ['attn_global'] * 3, types
    )
    assert too_many == 'removes 3 attn_global layers, only 2 are left'
    assert not MAPCollectHook._too_many(
        PruneSpec(6), ['attn_global'] * 2, types
    )


def test_fit_map_tool_over_three_types(tmp_path, capsys):
    points = write(tmp_path / 'points.csv', grid_points())
    args = [str(points), '--depth', '12', '--budget', '4', '--types', *TYPES]
    assert load_tool('fit_map').main(args) == 2
    assert 'needs --family' in capsys.readouterr().err
    saved = tmp_path / 'split.json'
    args += ['--family', 'windowed_vit', '--arch', 'base', '--cost']
    args += ['analytic', '--speedup', '1.2', '--save-allocation', str(saved)]
    assert load_tool('fit_map').main(args) == 0
    out = capsys.readouterr().out
    assert 'P(r_attn_window, r_attn_global, r_act)' in out
    assert 'speedup >= 1.2x: remove' in out
    best = json.loads(saved.read_text())['full']['best']
    assert best['counts'] == [4, 0, 0]


def test_collected_points_count_each_type(tmp_path):
    """A points row of a windowed ViT also counts its attention by type,
    which the three-type reader takes."""
    model = tiny_classifier()
    model.backbone.set_spec(PruneSpec(6, attn_removed=[0, 2], act_removed=[1]))
    runner = fake_runner(model)
    runner.work_dir = str(tmp_path)
    hook = MAPCollectHook(schedule='attn', selection='LowestGateScore')
    hook._state = dict(rows=[], removed=[], max_removed=2)
    hook._evaluate = lambda runner: 50.0
    hook._record_point(runner)
    points = load_type_points(tmp_path / 'map_points.csv', TYPES, 6)
    assert points[0].counts == (1, 1, 1) and points[0].accuracy == 50.0
    text = (tmp_path / 'map_points.csv').read_text().splitlines()
    row = next(csv.DictReader(text))
    assert (row['n_attn'], row['n_act']) == ('2', '1')
