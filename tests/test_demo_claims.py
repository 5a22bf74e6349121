"""The demo's claims, computed from typed results built by hand (no demo
run): which claims hold, their numbers, and the report's words for them."""

import pytest

from hetdpt_demo.claims import split_rows, summarise
from hetdpt_demo.plots import plot_split_comparison
from hetdpt_demo.report import claims_section, split_verdict
from hetdpt_demo.results import (
    BenchmarkModel,
    BenchmarkRun,
    CompareResult,
    CompareRun,
    DemoResults,
    DensePredictionRun,
    DenseResult,
    MapFitResult,
    MapPoints,
    MergeResult,
    PruneResult,
    RecoveryRun,
    RunInfo,
    TransferResult,
    from_json,
    to_json,
)
from hetdpt_mm.pruning import AnalyticCost, allocate, fit_map

ARCH = dict(
    arch=dict(embed_dims=96, num_heads=3, num_layers=6, mlp_ratio=4),
    img_size=[32, 32],
    patch_size=8,
)


def bench(speedup, macs_speedup=1.0):
    return BenchmarkRun(
        batch_size=16,
        threads=1,
        repeats=2,
        img_size=[32, 32],
        clock='process',
        macs_convention='with-attention-products',
        markdown='',
        models=dict(
            dense=BenchmarkModel(
                params=10,
                macs=100,
                median_ms=2.0,
                speedup=1.0,
                macs_speedup=1.0,
            ),
            merged=BenchmarkModel(
                params=8,
                macs=80,
                median_ms=1.0,
                speedup=speedup,
                macs_speedup=macs_speedup,
            ),
        ),
    )


def map_fit():
    """A fit of the demo ViT (depth 6, budget 4) predicting
    ``80 + 20 a + 10 t`` exactly: (0, 4) 103.33, (2, 2) 100.00, (4, 0)
    96.67."""
    kept = (1, 4 / 6, 2 / 6)  # 0, 2 or 4 layers of a type removed
    fit = fit_map(
        [(a, t, 80 + 20 * a + 10 * t) for a in kept for t in kept],
        degrees=(1,),
    )
    allocation = allocate(fit, budget=4, depth=6)
    return MapFitResult(
        fit=fit.to_dict(),
        bounds='full',
        fit_path='map_fit.json',
        allocation=allocation.to_dict(),
    )


def trained(metric):
    return DensePredictionRun(
        before={metric: 0.0},
        after={metric: 0.5},
        loss_curve=[[1, 2.0], [2, 1.0]],
        loss_first=2.0,
        loss_last=1.0,
        iterations=2,
        checkpoint='last.pth',
    )


def results(
    runs,
    merged_accuracy=98.5,
    pruned_accuracy=98.5,
    speeds=None,
    grads=(0.2, 0.1),
):
    """A finished run's results with the compared ``runs``; the main run
    removes (0, 4); ``speeds``: measured merged speedup by benchmark."""
    speeds = speeds or {'demo': 1.41}
    return DemoResults(
        dense=DenseResult(
            checkpoint='dense.pth', arch=ARCH, depth=6, accuracy=99.0
        ),
        map=MapPoints(
            points=[dict(n_attn='0', n_act='0'), dict(n_attn='1', n_act='0')],
            interval=1,
        ),
        fit=map_fit(),
        recovery=dict(
            attn=RecoveryRun(block=0, at_once=90.0, after_epochs=[95.0, 96.0]),
            act=RecoveryRun(block=1, at_once=10.0, after_epochs=[90.0, 97.0]),
        ),
        prune=PruneResult(
            checkpoint='prune.pth',
            accuracy=pruned_accuracy,
            hook_merged='hook.pth',
            spec=dict(
                n_attn=0, n_act=4, attn_removed=[], act_removed=[0, 1, 2, 3]
            ),
            decisions=[],
            score_grads=dict(attn=[[1, grads[0]]], act=[[1, grads[1]]]),
        ),
        compare=CompareResult(
            runs={str(i): run for i, run in enumerate(runs)},
            naive={},
            seeds=[0, 1],
        ),
        merge=MergeResult(merged='merged.pth', hook_output_identical=True),
        transfer=TransferResult(
            merged_accuracy=merged_accuracy,
            detr=trained('coco/bbox_mAP'),
            upernet=trained('mIoU'),
        ),
        benchmark={key: bench(speed) for key, speed in speeds.items()},
    )


def run(name, counts, seed, accuracy=None, main=False):
    return CompareRun(
        splits=[name],
        counts=list(counts),
        seed=seed,
        accuracy=accuracy,
        main=main,
    )


def summary_of(demo_results):
    info = RunInfo(
        mode='quick',
        command='demo',
        machine='cpu',
        jobs=1,
        threads=1,
        job_threads={},
        load_before=0.0,
        load_after=0.0,
        finished_at='now',
        wall_seconds=1.0,
        stages=[],
        job_seconds={},
        commands=[],
    )
    return summarise(info, demo_results, budget=4, classes=5, val_images=200)


def test_a_split_that_differs_between_seeds_gets_a_row_per_split():
    """The naive ranking can split the budget differently per seed: each
    split is its own row with its own speed, not one mean over two
    networks under the first seed's counts."""
    runs = [
        run('MAP', (0, 4), 0, main=True),
        run('MAP', (0, 4), 1, 99.0),
        run('attention_only', (4, 0), 0, 96.0),
        run('attention_only', (4, 0), 1, 96.5),
        run('gelu_only', (0, 4), 0, main=True),
        run('naive', (4, 0), 0, 97.0),
        run('naive', (2, 2), 1, 98.2),
    ]
    demo = results(
        runs,
        speeds={
            'demo': 1.41,
            'split-attn4-act0': 1.18,
            'split-attn2-act2': 1.30,
        },
    )
    cost = AnalyticCost.from_build_args(ARCH)
    splits = {row.name: row for row in split_rows(demo, cost)}
    assert list(splits) == [
        'MAP',
        'attention_only',
        'gelu_only',
        'naive (4 + 0)',
        'naive (2 + 2)',
    ]
    assert splits['MAP'].accuracies == [98.5, 99.0]
    assert splits['MAP'].mean == (98.5 + 99.0) / 2
    assert (
        splits['naive (4 + 0)'].accuracies,
        splits['naive (4 + 0)'].speedup,
    ) == ([97.0], 1.18)
    assert (
        splits['naive (2 + 2)'].seeds,
        splits['naive (2 + 2)'].accuracies,
        splits['naive (2 + 2)'].speedup,
    ) == ([1], [98.2], 1.30)
    assert splits['naive (2 + 2)'].macs_speedup == cost.speedup(2, 2)
    assert [row.method for row in splits.values()] == [
        'MAP',
        'attention_only',
        'gelu_only',
        'naive',
        'naive',
    ]
    assert plot_split_comparison(list(splits.values()), 97.0).startswith(
        b'\x89PNG'
    )


def test_claims_hold_or_not_with_their_numbers():
    runs = [
        run('MAP', (0, 4), 0, main=True),
        run('attention_only', (4, 0), 0, 96.0),
        run('gelu_only', (0, 4), 0, main=True),
        run('naive', (4, 0), 0, 96.0),
    ]
    summary = summary_of(
        results(runs, speeds={'demo': 1.41, 'split-attn4-act0': 1.18})
    )
    claims = {claim.name: claim for claim in summary.claims}
    assert list(claims) == [
        'gradient_disparity',
        'recovery_asymmetry',
        'map_split_most_accurate',
        'merge_exact',
        'hook_merge_identical',
        'merged_faster',
    ]
    # Attention scores got the larger gradients: unlike the paper.
    assert not claims['gradient_disparity'].holds
    assert claims['gradient_disparity'].numbers['ratio'] == 0.1 / 0.2
    assert to_json(summary.gradients) == dict(
        attn=dict(mean=0.2, median=0.2, count=1),
        act=dict(mean=0.1, median=0.1, count=1),
    )
    # GELU: 10 % at once, +87 points; attention 90 %, +6 points.
    assert claims['recovery_asymmetry'].holds
    assert claims['recovery_asymmetry'].numbers['act_at_once'] == 10.0
    split = claims['map_split_most_accurate']
    assert split.holds
    assert (
        split.numbers['best'],
        split.numbers['best_mean'],
        split.numbers['own'],
    ) == ('attention_only', 96.0, ['gelu_only'])
    assert claims['merge_exact'].holds and claims['merged_faster'].holds
    assert claims['merged_faster'].numbers['speedup'] == 1.41
    assert split_verdict(summary) == (
        "**MAP's split is the most accurate** (98.50 % against at best "
        '96.00 % for the other splits, mean over 1 seed(s)). (gelu_only '
        "removes MAP's own counts here: the same split, not a rival.)"
    )


@pytest.mark.parametrize(
    'rival, speed, verdict',
    [
        (
            99.0,
            1.18,
            "**MAP's split is not the most accurate here**: "
            'attention_only reaches 99.00 % against its 98.50 % (mean over 1 '
            'seed(s)).',
        ),
        (
            98.5,
            1.50,
            '**No split is more accurate: MAP ties with '
            'attention_only at 98.50 %** (mean over 1 seed(s)); '
            'at equal accuracy '
            'attention_only (4 + 0) is faster (1.50x against 1.41x), '
            "so on this task MAP's split does not win.",
        ),
        (
            98.5,
            1.18,
            '**No split is more accurate: MAP ties with '
            'attention_only at 98.50 %** (mean over 1 seed(s)); '
            "MAP's split is at least as fast.",
        ),
    ],
)
def test_the_split_verdict_names_the_winner_or_the_tie(rival, speed, verdict):
    runs = [
        run('MAP', (0, 4), 0, main=True),
        run('attention_only', (4, 0), 0, rival),
    ]
    summary = summary_of(
        results(runs, speeds={'demo': 1.41, 'split-attn4-act0': speed})
    )
    assert not summary.claim('map_split_most_accurate').holds
    assert split_verdict(summary) == verdict


@pytest.mark.parametrize(
    'rival, errors, ordered',
    [(96.0, (103.33 - 98.5, 96.67 - 96.0), 1), (99.0, (4.83, -2.33), 0)],
)
def test_maps_own_check_meets_its_predictions_with_the_measurements(
    rival, errors, ordered
):
    """MAP predicts (0, 4) 103.33 and (4, 0) 96.67; measured: 98.5 and
    ``rival`` (rows of MAP's own counts are counted once)."""
    runs = [
        run('MAP', (0, 4), 0, main=True),
        run('attention_only', (4, 0), 0, rival),
        run('gelu_only', (0, 4), 0, main=True),
    ]
    summary = summary_of(
        results(runs, speeds={'demo': 1.41, 'split-attn4-act0': 1.18})
    )
    assert [round(row.predicted, 2) for row in summary.splits] == [
        103.33,
        96.67,
        103.33,
    ]
    assert (
        summary.splits[0].predicted
        == summary.results.fit.allocation['best']['predicted_accuracy']
    )
    assert not any(row.extrapolated for row in summary.splits)
    check = summary.fit_check
    assert check.mean_error == pytest.approx(sum(errors) / 2, abs=0.01)
    assert check.mean_abs_error == pytest.approx(
        sum(map(abs, errors)) / 2, abs=0.01
    )
    assert (check.pairs, check.ordered) == (1, ordered)
    assert f'it ranks {ordered} of the 1 pair(s)' in '\n'.join(
        claims_section(summary)
    )


def test_a_merge_that_changes_accuracy_and_a_slower_model_are_named():
    runs = [run('MAP', (0, 4), 0, main=True)]
    summary = summary_of(
        results(
            runs, merged_accuracy=98.0, speeds={'demo': 0.9}, grads=(0.1, 0.3)
        )
    )
    assert not summary.claim('merge_exact').holds
    assert summary.claim('merge_exact').numbers == dict(
        pruned=98.5, merged=98.0
    )
    assert not summary.claim('merged_faster').holds
    assert summary.claim('gradient_disparity').holds
    assert split_verdict(summary) == (
        "Every split of this budget is MAP's own (0 + 4): nothing to compare."
    )


def test_typed_results_round_trip_and_name_a_malformed_entry():
    runs = [run('MAP', (0, 4), 0, main=True), run('naive', (4, 0), 0, 97.0)]
    demo = results(runs)
    data = to_json(demo)
    # Unset fields stay out: the main run has no accuracy of its own.
    assert data['compare']['runs']['0'] == dict(
        counts=[0, 4], seed=0, splits=['MAP'], main=True
    )
    assert 'accuracy' in data['compare']['runs']['1']
    assert from_json(DemoResults, data) == demo
    data['recovery']['act']['at_once'] = 'low'
    with pytest.raises(
        ValueError,
        match='"results.recovery.act.at_once" is a string, not a number',
    ):
        from_json(DemoResults, data)
    with pytest.raises(
        ValueError, match='"results.dense" has no "arch" entry'
    ):
        from_json(
            DemoResults,
            dict(dense=dict(checkpoint='x', depth=6, accuracy=1.0)),
        )


def test_maps_lead_is_read_against_the_seed_spread():
    """Over two seeds MAP leads attention only by 1.0 point, within the
    spread (MAP's half range 1.0); the verdict says so."""
    runs = [
        run('MAP', (0, 4), 0, main=True),
        run('MAP', (0, 4), 1, 96.5),
        run('attention_only', (4, 0), 0, 97.0),
        run('attention_only', (4, 0), 1, 96.0),
    ]
    summary = summary_of(
        results(runs, speeds={'demo': 1.41, 'split-attn4-act0': 1.18})
    )
    claim = summary.claim('map_split_most_accurate')
    assert claim.holds
    assert claim.numbers['margins'] == [
        dict(name='attention_only', lead=1.0, spread=1.0, seeds_won=2, seeds=2)
    ]
    assert split_verdict(summary).endswith(
        "MAP's lead against the seed spread (the larger half range of the "
        'two): attention_only: +1.00 points against a spread of ±1.00, '
        "**within it**; MAP's split the more accurate on 2 of 2 seeds. A "
        'lead within the spread is not shown by these seeds.'
    )
