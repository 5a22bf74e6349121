"""Reading the demo's run outputs, and its report and summary
(:mod:`hetdpt_demo`).

The demo's stages run the project's tools as subprocesses; this module reads
what they wrote (metrics JSON of ``tools/test.py``, the validations in
MMEngine's ``vis_data/scalars.json``), and turns the typed
:class:`~.claims.Summary` of a run into ``report.md`` (its sections are
in :mod:`.report_sections`, :mod:`.report_claims` and
:mod:`.tome_report`, its plots in :mod:`hetdpt_mm.visualization`) and
``summary.json`` (:func:`summary_json`).
"""

import json
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping

from .claims import Summary
from .report_claims import claims_section, split_verdict
from .report_format import duration, spread, table
from .report_sections import (
    benchmark_section,
    classification_section,
    dense_prediction_section,
    map_section,
    plus_section,
)
from .results import to_json
from .tome_report import tome_claims, tome_section, tome_summary_row

__all__ = [
    'read_json',
    'train_scalars',
    'val_records',
    'scalar_curve',
    'format_report',
    'headline',
    'summary_json',
    'all_numbers',
]


# ------------------------------------------------------------------ reading
def read_json(path) -> Any:
    with open(path, encoding='utf-8') as file:
        return json.load(file)


def train_scalars(run_dir) -> List[Dict[str, Any]]:
    """The scalars MMEngine logged (``<timestamp>/vis_data/scalars.json``)
    by the training run in ``run_dir``: the run whose records have a
    ``loss`` (a later ``tools/test.py`` run in the same directory adds its
    own timestamp directory without one)."""
    for scalars in sorted(Path(run_dir).glob('*/vis_data/scalars.json')):
        records = [
            json.loads(line)
            for line in scalars.read_text(encoding='utf-8').splitlines()
            if line.strip()
        ]
        if any('loss' in record for record in records):
            return records
    raise FileNotFoundError(
        f'no training scalars (*/vis_data/scalars.json '
        f'with a loss) under {run_dir}'
    )


def val_records(
    run_dir, metric: str = 'accuracy/top1'
) -> List[Dict[str, float]]:
    """The metrics of every validation of the training run in ``run_dir``
    (the records with ``metric``), in order, without MMEngine's timing
    fields."""
    return [
        {
            key: value
            for key, value in record.items()
            if key not in ('data_time', 'time', 'step')
        }
        for record in train_scalars(run_dir)
        if metric in record
    ]


def scalar_curve(
    records: Iterable[Mapping[str, Any]], key: str = 'loss'
) -> List[List[float]]:
    """``[[iteration, value], ...]`` of one logged scalar."""
    return [
        [int(record['iter']), float(record[key])]
        for record in records
        if key in record and 'iter' in record
    ]


def format_report(summary: Summary) -> str:
    """The markdown report of one demo run (``summary.json`` next to it
    holds the same numbers)."""
    run, results = summary.run, summary.results
    spec = results.prune.spec
    bench = results.benchmark['demo']
    dense, merged = bench.models['dense'], bench.models['merged']
    detr, upernet = results.transfer.detr, results.transfer.upernet
    lines = [
        f'# HetDPT end-to-end demo ({run.mode})',
        '',
        f'`{run.command}` on {run.machine}; total wall '
        f'time **{duration(run.wall_seconds)}** '
        f'({run.wall_seconds:.0f} s); load average (1 min) '
        f'{run.load_before:.2f} before, '
        f'{run.load_after:.2f} after; up to {run.jobs} '
        f'parallel job(s); threads per job: {run.threads} (see '
        'the job table).',
        '',
        '## Summary',
        '',
    ]
    lines += table(
        ['what', 'result'],
        [
            [
                'task',
                'shapes: do two distant glyphs have the same shape '
                f'(which) or different shapes; {summary.classes} classes, '
                f'chance {100 / summary.classes:.1f} %, 32x32, '
                f'{summary.val_images} '
                'validation images',
            ],
            [
                'dense top-1',
                f'{results.dense.accuracy:.2f} % (1 seed, its '
                'spread not measured)',
            ],
            [
                'pruned top-1 / merged top-1',
                f'{results.prune.accuracy:.2f} % / '
                f'{results.transfer.merged_accuracy:.2f} %',
            ],
            [
                'the same budget, mean top-1 over seeds',
                '; '.join(
                    f'{row.name} {spread(row.accuracies)}'
                    for row in summary.splits
                ),
            ],
            [
                'removed layers (MAP split)',
                f'{spec["n_attn"]} attention + {spec["n_act"]} GELU '
                f'of {results.dense.depth} each',
            ],
            [
                'merged backbone vs dense',
                f'{merged.speedup:.2f}x measured, {merged.macs_speedup:.2f}x '
                f'MACs ({bench.macs_convention}), params {dense.params:,} -> '
                f'{merged.params:,}',
            ],
            [
                'DETR bbox mAP before -> after',
                f'{100 * detr.before["coco/bbox_mAP"]:.1f} -> '
                f'{100 * detr.after["coco/bbox_mAP"]:.1f}',
            ],
            [
                'UperNet mIoU before -> after',
                f'{upernet.before["mIoU"]:.1f} -> {upernet.after["mIoU"]:.1f}',
            ],
            tome_summary_row(results.tome),
        ],
        'll',
    )
    lines += ['', '![accuracy vs speedup](accuracy_vs_speedup.png)', '']
    lines += claims_section(summary) + ['']
    lines += classification_section(summary) + ['']
    lines += map_section(summary) + ['']
    lines += dense_prediction_section(summary) + ['']
    lines += plus_section(summary) + ['']
    lines += benchmark_section(summary)
    lines += tome_section(results.tome) + ['']
    lines += ['## Time per stage', '']
    cpu = sum(stage.cpu_seconds for stage in run.stages)
    lines += [
        "CPU time: user + system time of the stage's subprocesses "
        '(what its jobs cost, whatever else the machine runs).',
        '',
    ]
    lines += table(
        ['stage', 'wall time', 'seconds', 'CPU seconds'],
        [
            [
                stage.title,
                duration(stage.seconds),
                f'{stage.seconds:.1f}',
                f'{stage.cpu_seconds:.1f}',
            ]
            for stage in run.stages
        ]
        + [
            [
                '**total**',
                f'**{duration(run.wall_seconds)}**',
                f'{run.wall_seconds:.1f}',
                f'{cpu:.1f}',
            ]
        ],
        'lrrr',
    )
    lines += [
        '',
        'Jobs (subprocesses; a stage runs its independent jobs side by side):',
        '',
    ]
    lines += table(
        ['job', 'threads', 'wall time', 'seconds'],
        [
            [
                name,
                run.job_threads.get(name, '-'),
                duration(seconds),
                f'{seconds:.1f}',
            ]
            for name, seconds in run.job_seconds.items()
        ],
        'lrrr',
    )
    lines += [
        '',
        '## Commands',
        '',
        'Every stage ran one of these (from the repository root; '
        'full logs in `logs/`):',
        '',
        '```bash',
    ]
    lines += run.commands + ['```', '']
    return '\n'.join(lines)


def headline(summary: Summary) -> str:
    """The main numbers in a few lines, for the console."""
    results = summary.results
    spec = results.prune.spec
    merged = results.benchmark['demo'].models['merged']
    detr, upernet = results.transfer.detr, results.transfer.upernet
    return '\n'.join(
        [
            f'  top-1: dense {results.dense.accuracy:.2f} %, pruned '
            f'{results.prune.accuracy:.2f} %, merged '
            f'{results.transfer.merged_accuracy:.2f} % (removed '
            f'{spec["n_attn"]} attention + {spec["n_act"]} GELU layers)',
            f'  merged backbone: {merged.speedup:.2f}x measured, '
            f'{merged.macs_speedup:.2f}x MACs',
            f'  DETR bbox mAP {100 * detr.before["coco/bbox_mAP"]:.1f} -> '
            f'{100 * detr.after["coco/bbox_mAP"]:.1f}; UperNet mIoU '
            f'{upernet.before["mIoU"]:.1f} -> {upernet.after["mIoU"]:.1f}',
            f'  wall time {duration(summary.run.wall_seconds)}',
        ]
    )


def summary_json(summary: Summary) -> Dict[str, Any]:
    """``summary.json``: the run, then every stage's results grouped as
    the report groups them, with the claims' numbers and verdict."""
    results = summary.results
    dense, prune, fit = results.dense, results.prune, results.fit
    tome = (
        {'skipped': True}
        if results.tome is None
        else dict(to_json(results.tome), claims=tome_claims(results.tome))
    )
    return dict(
        to_json(summary.run),
        classification=dict(
            arch=dense.arch.get('arch'),
            patch_size=dense.arch['patch_size'],
            depth=dense.depth,
            budget=summary.budget,
            classes=summary.classes,
            val_images=summary.val_images,
            dense=dict(accuracy=dense.accuracy, checkpoint=dense.checkpoint),
            pruned=dict(accuracy=prune.accuracy, checkpoint=prune.checkpoint),
            merged=dict(
                accuracy=results.transfer.merged_accuracy,
                checkpoint=results.merge.merged,
            ),
            pruned_equals_merged=summary.claim('merge_exact').holds,
            hook_output_identical=results.merge.hook_output_identical,
            spec=prune.spec,
            decisions=prune.decisions,
        ),
        map=dict(
            points=results.map.points,
            point_speedups=summary.point_speedups,
            fit=fit.fit,
            bounds=fit.bounds,
            allocation=fit.allocation,
            interval=results.map.interval,
            degree=fit.degree,
            cv_mae=fit.cv_mae,
            cv_rmse=fit.cv_rmse,
            n_attn=fit.n_attn,
            n_act=fit.n_act,
            predicted=fit.predicted,
        ),
        detr=to_json(results.transfer.detr),
        upernet=to_json(results.transfer.upernet),
        plus=to_json(results.plus),
        benchmark=to_json(results.benchmark),
        compare=to_json(results.compare),
        claims=dict(
            score_grads=dict(
                types=to_json(summary.gradients),
                ratio=summary.claim('gradient_disparity').numbers['ratio'],
            ),
            recovery=to_json(results.recovery),
            splits=to_json(summary.splits),
            verdict=split_verdict(summary),
            fit_check=to_json(summary.fit_check),
        ),
        tome=tome,
    )


def all_numbers(value: Any) -> List[float]:
    """Every number in a nested summary (for finiteness checks)."""
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [float(value)]
    if isinstance(value, Mapping):
        return [n for v in value.values() for n in all_numbers(v)]
    if isinstance(value, (list, tuple)):
        return [n for v in value for n in all_numbers(v)]
    return []
