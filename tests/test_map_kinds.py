"""MAP over the two kinds its ``t`` can count: GELUs (the paper's) and whole
FFN branches (whole-branch removal), as a points file's columns say.  The
fit, the allocations, the cost models, the report and the JSON outputs name
the kind; the paper's (attn, act) report stays as it was."""

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest
from helpers import REPO, fake_runner, load_tool
from mmengine.logging import MMLogger
from mmpretrain.registry import MODELS

from hetdpt_mm.errors import UsageError
from hetdpt_mm.hooks import HetDPTPruneHook
from hetdpt_mm.hooks.map_collect_hook import (
    BRANCH_POINT_COLUMNS,
    POINT_COLUMNS,
)
from hetdpt_mm.pruning import (
    AnalyticCost,
    MAPFit,
    MeasuredCost,
    allocate,
    allocate_for_speedup,
    fit_map,
    load_allocation,
    load_points_and_kind,
    parse_points,
    points_t_kind,
)

DEPTH = 12
fit_map_tool = load_tool('fit_map')
FitMapOptions, run_fit_map = (
    fit_map_tool.FitMapOptions,
    fit_map_tool.run_fit_map,
)
PAPER_REPORT = REPO / 'tests' / 'data' / 'fit_map_paper_report.txt'


def write_points(path: Path, t_kind: str) -> Path:
    """A 5 x 5 grid of removed counts at depth 12 with the columns
    MAPCollectHook writes for ``t_kind``, accuracies from a smooth surface
    with a little fixed noise."""
    columns = BRANCH_POINT_COLUMNS if t_kind == 'ffn' else POINT_COLUMNS
    noise = np.random.default_rng(0).normal(0, 0.05, 25)
    with open(path, 'w', newline='') as file:
        writer = csv.DictWriter(file, fieldnames=columns)
        writer.writeheader()
        for step, (n_attn, n_t) in enumerate(
            (i, j) for i in range(5) for j in range(5)
        ):
            a, t = (DEPTH - n_attn) / DEPTH, (DEPTH - n_t) / DEPTH
            writer.writerow(
                {
                    'step': step,
                    'schedule': 'interleaved',
                    'n_attn': n_attn,
                    f'n_{t_kind}': n_t,
                    'a': round(a, 4),
                    't': round(t, 4),
                    'accuracy': round(
                        60 + 12 * a + 9 * t - 2 * a * t + noise[step], 4
                    ),
                    'removed_attn': ' '.join(map(str, range(n_attn))),
                    f'removed_{t_kind}': ' '.join(map(str, range(n_t))),
                }
            )
    return path


def report(capsys, **options) -> str:
    run_fit_map(FitMapOptions(depth=DEPTH, **options))
    return capsys.readouterr().out


def test_paper_report_is_unchanged(capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    out = report(
        capsys,
        points=Path('tests/data/map_points_paper.csv'),
        budget=8,
        bounds='both',
        cost='analytic',
        arch='deit-base',
        speedup=(1.3, 1.5),
        min_accuracy=(80,),
    )
    assert out == PAPER_REPORT.read_text()


def test_points_file_columns_give_the_kind(tmp_path):
    for t_kind in ('act', 'ffn'):
        path = write_points(tmp_path / f'{t_kind}.csv', t_kind)
        points, kind = load_points_and_kind(path, depth=DEPTH)
        assert kind == t_kind and len(points) == 25
    assert points_t_kind([dict(a=1, t=0.5, accuracy=80)]) == 'act'
    with pytest.raises(ValueError, match='count both GELUs and FFN'):
        parse_points(
            [dict(n_attn=1, n_act=1, n_ffn=0, accuracy=80)], depth=DEPTH
        )
    with pytest.raises(ValueError, match='n_ffn=2 at depth 12'):
        parse_points(
            [dict(n_attn=1, n_ffn=2, t=0.5, accuracy=80)], depth=DEPTH
        )


def test_ffn_report_and_outputs_name_ffn_branches(tmp_path, capsys):
    points = write_points(tmp_path / 'ffn.csv', 'ffn')
    saved_fit, saved_split = tmp_path / 'fit.json', tmp_path / 'split.json'
    plot = tmp_path / 'map.svg'
    out = report(
        capsys,
        points=points,
        budget=6,
        cost='analytic',
        arch='deit-tiny',
        speedup=(1.2,),
        min_accuracy=(75,),
        save_fit=saved_fit,
        save_allocation=saved_split,
        plot=plot,
    )
    assert 'GELU' not in out and 'n_act' not in out
    assert '; t = FFN branches kept / depth;' in out
    assert out.count('n_attn n_ffn') == 3  # budget, speedup, accuracy
    assert 'FFN branch layers (a = ' in out
    cost = AnalyticCost.from_arch('deit-tiny')
    assert f'one FFN branch removed: {cost.speedup(0, n_ffn=1):.4f}x' in out

    fit = MAPFit.from_dict(json.loads(saved_fit.read_text()))
    assert fit.t_kind == 'ffn'
    assert fit == fit_map(load_points_and_kind(points, DEPTH)[0], t_kind='ffn')
    saved = json.loads(saved_split.read_text())['full']
    assert saved['t_kind'] == 'ffn'
    assert 'n_ffn' in saved['best'] and 'n_act' not in saved['best']
    assert load_allocation(saved_split, 'full') == allocate(fit, 6, DEPTH)
    svg = plot.read_text()
    assert 't = retained FFN branch ratio' in svg and 'n_ffn=' in svg
    assert 'GELU' not in svg and 'n_act' not in svg


def test_act_and_ffn_reports_differ_only_in_the_names(tmp_path, capsys):
    """Without a cost model the same numbers give the same report, the
    second count named for its kind."""
    reports = {}
    for t_kind in ('act', 'ffn'):
        path = write_points(tmp_path / 'points.csv', t_kind)
        reports[t_kind] = report(capsys, points=path, budget=6, bounds='both')
    renamed = (
        reports['ffn']
        .replace('; t = FFN branches kept / depth', '')
        .replace('n_ffn', 'n_act')
        .replace('FFN branch layers', 'GELU layers')
    )
    assert renamed == reports['act'] != reports['ffn']


def test_ffn_branches_are_priced_as_the_whole_ffn(tmp_path):
    cost = AnalyticCost.from_arch('deit-base')
    assert cost.total(0) - cost.total(0, n_ffn=1) == cost.ffn_macs
    assert cost.split_speedup(2, 3, 'ffn') == cost.speedup(2, n_ffn=3)
    assert cost.split_speedup(2, 3) == cost.speedup(2, 3)
    with pytest.raises(ValueError, match='exceed the 12 blocks'):
        cost.total(0, n_act=6, n_ffn=7)

    fit = fit_map(
        load_points_and_kind(write_points(tmp_path / 'ffn.csv', 'ffn'), DEPTH)[
            0
        ],
        t_kind='ffn',
    )
    best = allocate_for_speedup(fit, DEPTH, cost, 1.3).best
    assert best.speedup == cost.speedup(best.n_attn, n_ffn=best.n_act)
    assert best.speedup >= 1.3


def test_measured_cost_prices_ffn_branches_when_measured(tmp_path):
    measured = {
        'dense_total': 100.0,
        'attn': 4.0,
        'ffn_saving': 3.0,
        'depth': 12,
    }
    path = tmp_path / 'measured.json'
    path.write_text(json.dumps(measured))
    without = MeasuredCost.from_json(path)
    assert without.describe().endswith('per merged FFN 3')
    assert without.total(1, 2) == 100 - 4 - 6
    with pytest.raises(ValueError, match='no "ffn_branch" saving'):
        without.total(0, n_ffn=1)
    path.write_text(json.dumps(dict(measured, ffn_branch=3.5)))
    branch = MeasuredCost.from_json(path)
    assert branch.total(1, 2, 3) == 100 - 4 - 6 - 10.5
    assert branch.describe().endswith(', per FFN branch 3.5')
    with pytest.raises(ValueError, match='saves more than'):
        MeasuredCost(
            dense_total=100, attn=4, ffn_saving=3, ffn_branch=5, depth=12
        )


# ------------------------------------------------------- the prune hook
def gated_classifier():
    """A gated ViT of the points' depth, small enough to build quickly."""
    return MODELS.build(
        dict(
            type='ImageClassifier',
            backbone=dict(
                type='HetDPTViT',
                arch=dict(embed_dims=24, num_layers=DEPTH, num_heads=2),
                img_size=16,
                patch_size=8,
                gated=True,
            ),
            head=dict(
                type='VisionTransformerClsHead', num_classes=10, in_channels=24
            ),
        )
    )


@pytest.mark.parametrize(
    't_kind, map_kinds', [('ffn', ('attn', 'act')), ('act', ('attn', 'ffn'))]
)
def test_prune_hook_refuses_points_of_other_kinds(tmp_path, t_kind, map_kinds):
    """Before training, naming the file, its kinds and map_kinds."""
    path = write_points(tmp_path / f'{t_kind}.csv', t_kind)
    model = gated_classifier()
    hook = HetDPTPruneHook(
        map_points=str(path), budget=4, map_kinds=map_kinds, stages=1
    )
    message = (
        re.escape(
            f"MAP points file {path} counts ('attn', "
            f"'{t_kind}') (its columns: t counts the "
        )
        + '.*'
        + re.escape(f' kept), but map_kinds is {map_kinds}')
    )
    with pytest.raises(UsageError, match=message):
        hook.before_train(fake_runner(model))
    assert model.backbone.prune_spec.is_dense and hook.order == []


def test_prune_hook_refuses_a_fit_of_other_kinds(tmp_path):
    points = load_points_and_kind(
        write_points(tmp_path / 'ffn.csv', 'ffn'), DEPTH
    )[0]
    fit = fit_map(points, t_kind='ffn').to_dict()
    path = tmp_path / 'fit.json'
    path.write_text(json.dumps(fit))
    for map_fit, name in ((fit, 'the given fit'), (str(path), f'fit {path}')):
        hook = HetDPTPruneHook(map_fit=map_fit, budget=4, stages=1)
        with pytest.raises(
            UsageError,
            match=re.escape(
                f"MAP {name} counts ('attn', 'ffn') (its t_kind: t counts "
                "the FFN branches kept), but map_kinds is ('attn', 'act')"
            ),
        ):
            hook.before_train(fake_runner(gated_classifier()))


def test_prune_hook_reads_points_of_its_kinds_and_ratios_alone(tmp_path):
    """Points of the hook's kinds, or ratios alone (which say nothing),
    give MAP's allocation with its second count under map_kinds[1]."""
    logger = MMLogger.get_current_instance()
    ffn = write_points(tmp_path / 'ffn.csv', 'ffn')
    hook = HetDPTPruneHook(
        map_points=str(ffn), budget=4, map_kinds=('attn', 'ffn')
    )
    split = allocate(
        fit_map(load_points_and_kind(ffn, DEPTH)[0], t_kind='ffn'), 4, DEPTH
    )
    assert hook._resolve_counts(DEPTH, logger) == dict(
        attn=split.n_attn, act=0, ffn=split.n_act
    )
    paper = REPO / 'tests' / 'data' / 'map_points_paper.csv'
    assert load_points_and_kind(paper, DEPTH, unrecorded=None)[1] is None
    for map_kinds in (('attn', 'act'), ('attn', 'ffn')):
        hook = HetDPTPruneHook(
            map_points=str(paper), budget=4, map_kinds=map_kinds
        )
        counts = hook._resolve_counts(DEPTH, logger)
        assert counts[map_kinds[1]] + counts['attn'] == 4
