"""The end-to-end demo (tools/demo.py, issue 7): the --quick variant runs
every stage as a user would (the project's tools, as subprocesses or in the
demo's process) and writes its report; here we check what it produced."""

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, load_tool
from mmengine.config import Config, DictAction

from hetdpt_demo import Demo, DemoOptions
from hetdpt_demo.jobs import default_jobs
from hetdpt_demo.plots import plot_fig8, plot_tome
from hetdpt_demo.report import all_numbers
from hetdpt_demo.results import (
    TomePoint,
    TomeResult,
    from_json,
    to_json,
)
from hetdpt_demo.stages_tome import token_merge_options
from hetdpt_demo.tome_claims import pareto_front, tome_comparison
from hetdpt_demo.tome_report import (
    tome_section,
    tome_summary_row,
    tome_verdicts,
)
from hetdpt_mm.checkpoint.reader import read_backbone_checkpoint
from hetdpt_mm.checkpoint.safe_load import load_checkpoint_file
from hetdpt_mm.models.token_merge import TokenMerge


@pytest.fixture(scope='module')
def quick_run(tmp_path_factory):
    """One ``--quick`` run into a temporary work dir and data root."""
    root = tmp_path_factory.mktemp('demo')
    work_dir, data_root = root / 'demo', root / 'data'
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / 'tools' / 'demo.py'),
            '--quick',
            '--work-dir',
            str(work_dir),
            '--data-root',
            str(data_root),
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    return work_dir, data_root, output


def test_quick_demo_writes_the_report_with_its_tables(quick_run):
    work_dir, _, output = quick_run
    report = (work_dir / 'report.md').read_text()
    for heading in (
        '## Summary',
        '## Classification: dense vs pruned vs merged',
        '### Chosen layers',
        '## MAP: points, fit, allocation',
        '## Transfer: DETR and UperNet',
        '## HetDPT+: the merged model pruned in width',
        '## Why heterogeneity-aware allocation',
        '### 1. Gradient disparity',
        '### 2. Recovery asymmetry',
        '### 3. The same budget, four allocations',
        '## Benchmark',
        '## Time per stage',
        '## Commands',
    ):
        assert heading in report, heading
    for header in (
        '| model | what | top-1 (%) |',
        '| schedule | step | n_attn | n_act |',
        '| degree | terms | CV MAE |',
        '| model | metric | before training | after training |',
        '| stage | wall time | seconds | CPU seconds |',
        '| type | mean |dL/dm| |',
        '| removed | at once |',
        '| split | attention + GELU removed | top-1 (%) |',
    ):
        assert header in report, header
    for image in (
        'accuracy_vs_speedup.png',
        'losses.png',
        'score_grads.png',
        'recovery.png',
        'comparison.png',
        'map/map_fit.png',
        'vit-demo_digits_plus/widths.png',
    ):
        assert f']({image})' in report
        assert (work_dir / image).read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    # Progress went to the console: stage banners and the final numbers.
    assert '[13/13] write the report' in output
    assert 'Skipped in the `--quick` demo' in report
    assert 'top-1: dense' in output


def test_quick_demo_numbers_are_finite_and_consistent(quick_run):
    work_dir, data_root, _ = quick_run
    summary = json.loads((work_dir / 'summary.json').read_text())
    numbers = all_numbers(summary)
    assert numbers and all(math.isfinite(n) for n in numbers)

    results = summary['results']
    accuracy = dict(
        dense=results['dense']['accuracy'],
        pruned=results['prune']['accuracy'],
        merged=results['transfer']['merged_accuracy'],
    )
    for name in ('dense', 'pruned', 'merged'):
        assert 0 <= accuracy[name] <= 100
    # Merging changes no prediction (at most a near-tie flips: one image).
    assert (
        abs(accuracy['pruned'] - accuracy['merged'])
        <= 100 / summary['val_images'] + 1e-9
    )
    assert results['merge']['hook_output_identical']
    # the demo's patch, not the digits configs' 4
    assert results['dense']['arch']['patch_size'] == 8
    assert (
        summary['val_images']
        == len((data_root / 'shapes/meta/val.txt').read_text().split('\n')) - 1
    )

    # Exactly the MAP split of the budget was removed, one decision each.
    spec, decisions = results['prune']['spec'], results['prune']['decisions']
    assert spec['n_attn'] + spec['n_act'] == summary['budget'] == 2
    best = results['fit']['allocation']['best']
    assert (spec['n_attn'], spec['n_act']) == (best['n_attn'], best['n_act'])
    assert len(decisions) == summary['budget']
    assert (
        sorted(d['index'] for d in decisions if d['kind'] == 'act')
        == spec['act_removed']
    )

    bench = results['benchmark']['demo']['models']
    assert bench['dense']['speedup'] == pytest.approx(1.0)
    assert bench['merged']['params'] < bench['dense']['params']
    assert bench['merged']['macs'] < bench['dense']['macs']
    # --quick: no DeiT-S; one benchmark per other compared split.
    assert 'context' not in results['benchmark']
    assert all(
        key == 'demo' or key.startswith('split-attn')
        for key in results['benchmark']
    )

    for kind, metric in (('detr', 'coco/bbox_mAP'), ('upernet', 'mIoU')):
        assert metric in results['transfer'][kind]['before']
        assert metric in results['transfer'][kind]['after']
        assert results['transfer'][kind]['iterations'] >= 2
    assert {s['name'] for s in summary['run']['stages']} == {
        'data',
        'dense',
        'map',
        'recovery',
        'fit',
        'prune',
        'compare',
        'merge',
        'transfer',
        'plus',
        'benchmark',
        'tome',
    }
    # --quick: no ToMe
    assert results['tome_skipped'] and 'tome' not in results
    assert summary['tome'] is None
    plus = results['plus']
    assert plus['macs'][1] < plus['macs'][0]
    assert plus['params'][1] < plus['params'][0]
    assert plus['widths']['embed_dims'] < 96  # the demo ViT's width
    for value in (plus['accuracy_before'], plus['accuracy']):
        assert 0 <= value <= 100
    assert 'coco/bbox_mAP' in plus['detr'] and 'mIoU' in plus['upernet']


def test_quick_demo_shows_the_claims(quick_run):
    work_dir, _, _ = quick_run
    summary = json.loads((work_dir / 'summary.json').read_text())
    results = summary['results']
    claims = {claim['name']: claim for claim in summary['claims']}
    grads = summary['gradients']
    for kind in ('attn', 'act'):
        assert grads[kind]['count'] > 0
        assert grads[kind]['mean'] > 0
    assert claims['gradient_disparity']['numbers']['ratio'] > 0
    # One layer removed from the dense model, tested, fine-tuned 2 epochs.
    for kind in ('attn', 'act'):
        run = results['recovery'][kind]
        assert 0 <= run['block'] < results['dense']['depth']
        assert len(run['after_epochs']) == 2
        for value in [run['at_once']] + run['after_epochs']:
            assert 0 <= value <= 100
    # The same budget split four ways, each pruned once (quick: 1 seed).
    budget = summary['budget']
    splits = {split['name']: split for split in summary['splits']}
    assert list(splits) == ['MAP', 'attention_only', 'gelu_only', 'naive']
    assert (
        splits['attention_only']['n_attn'],
        splits['gelu_only']['n_act'],
    ) == (budget, budget)
    for split in splits.values():
        assert split['n_attn'] + split['n_act'] == budget
        assert split['seeds'] == [0]
        assert 0 <= split['mean'] <= 100 and split['speedup'] > 0
    assert splits['MAP']['accuracies'] == [
        results['transfer']['merged_accuracy']
    ]
    naive = results['compare']['naive']['0']
    assert sum(map(len, naive['removed'].values())) == budget
    assert naive['counts'] == [
        splits['naive']['n_attn'],
        splits['naive']['n_act'],
    ]
    assert "MAP's" in summary['verdicts']['split']


def test_quick_demo_checks_maps_predictions(quick_run):
    """MAP's own check: each compared split carries the fit's prediction
    for its counts (its allocation's candidate), and the check's numbers
    are those of the predictions against the measured means."""
    work_dir, _, _ = quick_run
    summary = json.loads((work_dir / 'summary.json').read_text())
    allocation = summary['results']['fit']['allocation']
    candidates = {
        (c['n_attn'], c['n_act']): c for c in allocation['candidates']
    }
    splits = summary['splits']
    for split in splits:
        candidate = candidates[split['n_attn'], split['n_act']]
        assert split['predicted'] == candidate['predicted_accuracy']
        assert split['extrapolated'] == candidate['extrapolated']
    assert splits[0]['predicted'] == (allocation['best']['predicted_accuracy'])
    distinct = list({(s['n_attn'], s['n_act']): s for s in splits}.values())
    errors = [split['predicted'] - split['mean'] for split in distinct]
    check = summary['fit_check']
    assert check['mean_error'] == pytest.approx(sum(errors) / len(errors))
    assert check['mean_abs_error'] == pytest.approx(
        sum(map(abs, errors)) / len(errors)
    )
    assert 0 <= check['ordered'] <= check['pairs']
    assert check['pairs'] <= len(distinct) * (len(distinct) - 1) // 2
    report = (work_dir / 'report.md').read_text()
    assert "**MAP's own check**" in report
    assert "MAP's prediction (%)" in report


def test_quick_demo_stage_outputs(quick_run):
    work_dir, _, _ = quick_run
    with open(work_dir / 'map/map_points.csv') as file:
        rows = list(csv.DictReader(file))
    # The dense point once, then 2 steps of each of the three schedules.
    assert [r['step'] for r in rows] == ['0'] + ['1', '2'] * 3
    assert [r['schedule'] for r in rows[1:]] == [
        'attn',
        'attn',
        'act',
        'act',
        'interleaved',
        'interleaved',
    ]
    assert json.loads((work_dir / 'map/map_fit.json').read_text())

    merged = load_checkpoint_file(
        work_dir / 'vit-demo_digits_hetdpt/merged.pth'
    )
    record = read_backbone_checkpoint(merged).record
    assert record.form == 'merged'
    assert record.spec.n_attn + record.spec.n_act == 2
    # The HetDPT+ test run in the DETR work dir left the run's dump alone:
    # it names the checkpoint the DETR run trained from.
    detr = Config.fromfile(work_dir / 'detr_hetdpt_demo/detr_hetdpt_demo.py')
    assert detr.model.backbone.init_cfg.checkpoint.endswith(
        'vit-demo_digits_hetdpt/merged.pth'
    )
    for path in (
        'vit-demo_digits_hetdpt/test_metrics_merged.json',
        'vit-demo_digits_plus/plus.pth',
        'vit-demo_digits_plus/widths.png',
        'vit-demo_digits_plus/test_metrics_detr.json',
        'benchmark/demo.json',
        'benchmark/demo.md',
        'logs/dense-train.log',
        'logs/merge.log',
        'demo.log',
    ):
        assert (work_dir / path).is_file(), path


def test_resume_skips_finished_stages(quick_run):
    work_dir, data_root, _ = quick_run
    report = (work_dir / 'report.md').read_text()
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / 'tools' / 'demo.py'),
            '--quick',
            '--work-dir',
            str(work_dir),
            '--data-root',
            str(data_root),
            '--resume',
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (
        result.stdout.count('done in an earlier run, skipped')
        + result.stderr.count('done in an earlier run, skipped')
        == 13
    )
    assert (work_dir / 'report.md').read_text() == report


def test_results_follow_neither_the_load_nor_jobs(
    quick_run, tmp_path, monkeypatch
):
    """The dense and MAP stages again, with fewer jobs side by side and the
    machine reported as overloaded: each job gets the threads it had in the
    quick run, and the stages give the same accuracy and MAP points."""
    work_dir, data_root, _ = quick_run
    quick = json.loads((work_dir / 'demo_state.json').read_text())
    monkeypatch.setattr(os, 'getloadavg', lambda: (64.0, 64.0, 64.0))

    class FirstStages(Demo):
        STAGES = Demo.STAGES[:3]  # data (made already), dense, map

    demo = FirstStages(
        DemoOptions(
            repo=REPO,
            work_dir=tmp_path / 'demo',
            data_root=data_root,
            quick=True,
            jobs=default_jobs() - 1,
        )
    )
    demo.results.headline = ''  # printed at the end; no report stage here
    demo.run()
    assert demo.jobs.threads_used == {
        name: quick['job_threads'][name]
        for name in ('dense-train', 'map-attn', 'map-act', 'map-interleaved')
    }
    assert demo.results.dense.accuracy == quick['results']['dense']['accuracy']
    assert to_json(demo.results.map) == quick['results']['map']


def test_bad_work_dirs_are_refused_before_anything_runs(tmp_path, capsys):
    demo = load_tool('demo')
    foreign = tmp_path / 'foreign'
    foreign.mkdir()
    (foreign / 'notes.txt').write_text('mine')
    assert demo.main(['--quick', '--work-dir', str(foreign)]) == 2
    assert 'holds no earlier demo run' in capsys.readouterr().err
    assert sorted(p.name for p in foreign.iterdir()) == ['notes.txt']

    assert (
        demo.main(
            ['--quick', '--work-dir', str(tmp_path / 'none'), '--resume']
        )
        == 2
    )
    assert 'no earlier demo run' in capsys.readouterr().err
    assert not (tmp_path / 'none').exists()


@pytest.mark.parametrize(
    'case, problem',
    [
        (
            'truncated',
            'Unterminated string starting at: line 1 column 24 (char 23)',
        ),
        (
            'not UTF-8',
            "'utf-8' codec can't decode byte 0xff in position 0: "
            'invalid start byte',
        ),
        ('an array', 'it holds an array, not an object'),
        ('no results', 'it has no "results" entry'),
        ('finished a string', '"finished" is a string, not an array'),
        ('unknown stage', '"finished" names an unknown stage, \'nap\''),
        ('seconds a string', '"seconds" holds "long" for dense, not a number'),
        ('a result malformed', '"results.dense" has no "arch" entry'),
    ],
)
def test_a_malformed_state_is_named_on_resume(tmp_path, capsys, case, problem):
    work_dir, data_root = tmp_path / 'demo', tmp_path / 'data'
    work_dir.mkdir()
    state = Demo(
        DemoOptions(
            repo=REPO, work_dir=work_dir, data_root=data_root, quick=True
        )
    ).state
    state.update(finished=['data', 'dense'], seconds=dict(data=1, dense=2.5))
    text = {
        'truncated': '{"version": 5, "mode": "qu',
        'not UTF-8': b'\xff\xfe{}'.decode('latin-1'),
        'an array': '[1, 2]',
        'no results': json.dumps(
            {k: v for k, v in state.items() if k != 'results'}
        ),
        'finished a string': json.dumps(dict(state, finished='dense')),
        'unknown stage': json.dumps(dict(state, finished=['dense', 'nap'])),
        'seconds a string': json.dumps(
            dict(state, seconds=dict(dense='long'))
        ),
        'a result malformed': json.dumps(
            dict(
                state,
                results=dict(
                    dense=dict(checkpoint='dense.pth', depth=6, accuracy=90.0)
                ),
            )
        ),
    }[case]
    state_file = work_dir / 'demo_state.json'
    state_file.write_bytes(text.encode('latin-1'))
    code = load_tool('demo').main(
        [
            '--quick',
            '--work-dir',
            str(work_dir),
            '--data-root',
            str(data_root),
            '--resume',
        ]
    )
    assert (code, capsys.readouterr().err) == (
        2,
        f'error: demo state {state_file} is malformed: {problem}; delete '
        'it to start over\n',
    )
    assert [path.name for path in work_dir.iterdir()] == ['demo_state.json']
    assert not data_root.exists()


def test_a_state_of_another_version_is_refused_on_resume(tmp_path, capsys):
    """An earlier state version keeps its results in another form: the
    resume is refused before anything runs, as for other settings."""
    work_dir, data_root = tmp_path / 'demo', tmp_path / 'data'
    work_dir.mkdir()
    state = Demo(
        DemoOptions(
            repo=REPO, work_dir=work_dir, data_root=data_root, quick=True
        )
    ).state
    old = dict(
        state,
        version=state['version'] - 1,
        finished=['data'],
        results=dict(prune=dict(merged='merged.pth')),
    )
    (work_dir / 'demo_state.json').write_text(json.dumps(old))
    code = load_tool('demo').main(
        [
            '--quick',
            '--work-dir',
            str(work_dir),
            '--data-root',
            str(data_root),
            '--resume',
        ]
    )
    assert code == 2
    assert 'used other settings' in capsys.readouterr().err
    assert not data_root.exists()


def test_in_process_jobs_run_in_the_repository_and_log_their_output(
    tmp_path, monkeypatch
):
    from mmengine.logging import MMLogger

    from hetdpt_demo.jobs import Job, JobError, JobRunner

    repo = tmp_path / 'repo'
    (repo / 'tools').mkdir(parents=True)
    (repo / 'tools' / 'where.py').write_text(
        'import os, sys\n'
        'def main(argv):\n'
        '    print("cwd", os.getcwd(), "args", argv)\n'
        '    print("error: bad", file=sys.stderr)\n'
        '    return int(argv[0])\n'
    )
    monkeypatch.chdir(tmp_path)
    runner = JobRunner(
        MMLogger.get_instance('in_process_jobs'),
        repo,
        tmp_path,
        threads=1,
        jobs=2,
    )
    runner.run_lanes([[Job('ok', ['tools/where.py', '0'], in_process=True)]])
    assert (tmp_path / 'ok.log').read_text() == (
        f"cwd {repo} args ['0']\nerror: bad\n"
    )
    assert runner.commands == ['OMP_NUM_THREADS=1 python tools/where.py 0']
    with pytest.raises(JobError, match='failed with exit status 3'):
        runner.run_lanes(
            [[Job('fails', ['tools/where.py', '3'], in_process=True)]]
        )
    assert str(tmp_path) == str(Path.cwd())


def fake_tome():
    """The ToMe stage's results for r = 0, 1, 2: dense 90 % at 1000 img/s
    losing 2 points per r and gaining 200 img/s; HetDPT 88 % at 1500 img/s
    and the attention-only split 80 % at 1600 img/s with the same steps;
    the latter without merging in its attention-removed blocks 1 point
    better and 100 img/s slower per r."""
    points = []
    for r in (0, 1, 2):
        for model, accuracy, speed in (
            ('dense', 90 - 2 * r, 1000 + 200 * r),
            ('hetdpt', 88 - 2 * r, 1500 + 200 * r),
            ('attn_only', 80 - 2 * r, 1600 + 200 * r),
            ('attn_only_none', 80 - r, 1600 + 100 * r),
        ):
            points.append(
                dict(
                    model=model,
                    r=r,
                    accuracy=accuracy,
                    median_ms=1.0,
                    throughput=speed,
                    macs=10e6 / (1 + r),
                    removed_attn='none' if 'none' in model else 'norm',
                )
            )
    transfer = {
        kind: dict(
            metric=metric,
            img_size=[48, 48],
            batch_size=8,
            repeats=3,
            macs_convention='with-attention-products',
            points=[
                dict(
                    r=r,
                    metric=value,
                    macs=2e7 - 1e6 * r,
                    median_ms=10.0,
                    throughput=100.0,
                    speedup=1 + r / 10,
                )
                for r, value in ((0, start), (2, start / 2))
            ],
        )
        for kind, metric, start in (
            ('detr', 'coco/bbox_mAP', 0.2),
            ('upernet', 'mIoU', 40.0),
        )
    }
    # Fig. 8: the ToMe points above, and GTP-ViT on three models.
    curves = [
        dict(
            model=p['model'],
            method='tome',
            setting=f'r={p["r"]}',
            accuracy=p['accuracy'],
            throughput=p['throughput'],
            macs=p['macs'],
        )
        for p in points
        if p['model'] in ('dense', 'hetdpt')
    ] + [
        dict(
            model=model,
            method='gtp',
            setting=f'num_prop={n}',
            accuracy=accuracy,
            throughput=speed,
            macs=1e6,
        )
        for model, line in (
            ('dense', ((90, 1000), (87, 1300), (80, 1500))),
            ('hetdpt', ((88, 1500), (86, 1900), (79, 2200))),
            ('attn_only', ((80, 1600), (77, 1650))),
        )
        for n, (accuracy, speed) in enumerate(line)
    ]
    return from_json(
        TomeResult,
        dict(
            r=[0, 1, 2],
            points=points,
            curves=curves,
            transfer=transfer,
            map_attn_removed=[],
            attn_only=dict(attn_removed=[0, 2], seed=0),
            timing=dict(
                batch_size=64,
                threads=1,
                repeats=15,
                clock='process',
                img_size=[32, 32],
                macs_convention='with-attention-products',
            ),
        ),
    )


def test_tome_claims_compare_at_equal_r_and_name_the_front():
    tome = fake_tome()
    comparison = tome_comparison(tome)
    verdicts = tome_verdicts(tome, comparison)
    assert [row.speedup for row in comparison.equal_r] == [
        1500 / 1000,
        1700 / 1200,
        1900 / 1400,
    ]
    assert [
        (row.dense_accuracy, row.hetdpt_accuracy) for row in comparison.equal_r
    ] == [(90, 88), (88, 86), (86, 84)]
    # Dense r=1 (88 % at 1200) is beaten by HetDPT r=0 (88 % at 1500).
    assert [f'{p.model}-r{p.r}' for p in comparison.front] == [
        'hetdpt-r2',
        'hetdpt-r1',
        'hetdpt-r0',
        'dense-r0',
    ]
    assert '1.36x to 1.50x' in verdicts['equal_r']
    faster = comparison.claims[0]
    assert (faster.name, faster.holds, faster.numbers) == (
        'tome_hetdpt_faster',
        True,
        dict(min_speedup=1900 / 1400, max_speedup=1500 / 1000),
    )
    assert '**faster**' in verdicts['equal_r']
    assert (
        'ToMe alone (dense, r=2 against r=0): 1.40x measured, 3.00x '
        'fewer MACs, -4.00 points.'
    ) in verdicts['equal_r']
    assert [
        (row.r, row.norm_accuracy, row.none_accuracy, row.norm_speedup)
        for row in comparison.removed_attn
    ] == [(1, 78, 79, 1800 / 1700), (2, 76, 78, 2000 / 1800)]
    assert '-1.50 points' in verdicts['removed_attn']
    # Nothing beats none r=1 (79 % at 1700); norm r=1 ties none r=2.
    assert [f'{p.model}-r{p.r}' for p in comparison.removed_attn_front] == [
        'attn_only-r2',
        'attn_only-r1',
        'attn_only_none-r2',
        'attn_only_none-r1',
        'attn_only-r0',
    ]


def test_pareto_front_keeps_ties_and_drops_dominated_points():
    points = [
        TomePoint(
            model='dense',
            r=0,
            removed_attn='norm',
            accuracy=a,
            median_ms=1.0,
            throughput=t,
            macs=1,
        )
        for a, t in ((90, 100), (90, 100), (80, 100), (85, 200))
    ]
    assert pareto_front(points) == [points[3], points[0], points[1]]


def test_tome_section_renders_the_tables_and_the_quick_skip():
    tome = fake_tome()
    comparison = tome_comparison(tome)
    text = '\n'.join(tome_section(tome, comparison))
    assert (
        '| 1 | 88.00 | 1,200 | 5.00 M | 86.00 | 1,700 | 5.00 M | 1.42x |'
        in text
    )
    assert (
        '| 2 | 76.00 | 2,000 | 3.33 M | 78.00 | 1,800 | 3.33 M | 1.11x |'
    ) in text
    assert 'The MAP split removed attention in no block' in text
    assert 'attention removed in blocks 0, 2' in text
    assert (
        '| DETR (toy COCO) | 2 | bbox mAP 10.0 | 18.00 M | 100 | 1.20x |'
        in text
    )
    assert '| UperNet (toy ADE20K) | 0 | mIoU 40.0 |' in text
    assert '![ToMe](tome.png)' in text
    assert (
        '| r | dense + ToMe: top-1 (%) | img/s | MACs/img (with-'
        'attention-products) |' in text
    )
    assert tome_summary_row(comparison)[1].startswith(
        'r=0: 1.50x (88.00 vs 90.00 %), r=1: 1.42x'
    )
    assert 'Skipped in the `--quick` demo' in tome_section(None, None)[-1]
    assert tome_summary_row(None)[1] == 'not measured in the --quick demo'
    assert plot_tome(tome.points).startswith(b'\x89PNG')


def test_fig8_section_reads_both_methods_beside_the_papers_figures():
    tome = fake_tome()
    comparison = tome_comparison(tome)
    text = '\n'.join(tome_section(tome, comparison))
    assert '![Fig. 8](fig8.png)' in text
    assert '#### ToMe' in text and '#### GTP-ViT' in text
    assert (
        'HetDPT + ToMe over dense + ToMe, measured throughput read off the '
        'envelopes: at equal accuracy 1.21x to 1.25x; at equal accuracy '
        'drop 1.36x to 1.50x; at a 0.9-point drop 1.46x (1,590 vs 1,090 '
        'img/s). The paper (DeiT-B on a GPU, Fig. 8, docs/method.md): '
        'HetDPT + ToMe 1410.6 vs dense + ToMe 884.07 img/s at about a '
        '0.9-point accuracy drop (1.60x); "under comparable accuracy '
        'drops ... 1.5-1.6x".'
    ) in text
    assert (
        'HetDPT + GTP-ViT 1461.76 vs dense + GTP-ViT 1175.5 img/s at '
        '81.47 % top-1 (1.24x).' in text
    )
    assert '| 88.00 % | 1,200 | 1,500 | 1.25x |' in text
    assert '| 2.00 points | 1,200 | 1,700 | 1.42x |' in text
    assert '| hetdpt | num_prop=1 | 86.00 | 1,900 | 1.00 M | yes |' in text
    # equal r stays, labelled as such
    assert 'than dense + ToMe at equal r' in text
    assert 'GTP-ViT in blocks whose attention was removed' in text
    assert 'attention removed in blocks 0, 2' in text
    tome_reading, gtp_reading = comparison.fig8
    assert [p.setting for p in gtp_reading.envelopes['dense']] == [
        'num_prop=0',
        'num_prop=1',
        'num_prop=2',
    ]
    assert tome_reading.at_paper_drop.ratio == pytest.approx(1590 / 1090)
    assert plot_fig8(tome.curves, comparison.fig8).startswith(b'\x89PNG')


def test_tome_options_set_the_backbone_option():
    """The stage's --cfg-options, parsed as tools/test.py parses them, give
    the demo config's backbone its ToMe option."""
    cfg = Config.fromfile(REPO / 'configs/demo/vit-demo_digits.py')
    cfg.merge_from_dict(
        {
            key: DictAction._parse_iterable(value)
            for key, _, value in (
                option.partition('=')
                for option in token_merge_options(3, 'none')
            )
        }
    )
    assert TokenMerge.coerce(cfg.model.backbone.token_merge) == TokenMerge(
        r=3, removed_attn='none'
    )
