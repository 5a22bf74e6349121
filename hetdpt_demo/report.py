"""The demo's report (:mod:`hetdpt_demo`): the typed
:class:`~.claims.Summary` of a run in words, ``report.md`` one function per
section (the token-merging one in :mod:`.tome_report`), and the statements
``summary.json`` keeps beside the summary (:func:`verdicts`).
"""

import json
import statistics
from typing import Any, Dict, List, Mapping

from hetdpt_mm.pruning import Allocation, MAPFit
from hetdpt_mm.spec import ACT, ATTN

from .claims import Summary
from .report_format import (
    LAYER_TYPE_NAMES,
    blocks,
    clock_name,
    duration,
    spread,
    table,
)
from .tome_report import tome_section, tome_summary_row, tome_verdicts

# ---------------------------------------------------------- sections
#: DETR and UperNet: (result field, title, metric, its name, scale).
DENSE_PREDICTION = (
    ('detr', 'DETR (toy COCO)', 'coco/bbox_mAP', 'bbox mAP', 100),
    ('upernet', 'UperNet (toy ADE20K)', 'mIoU', 'mIoU', 1),
)


def classification_section(summary: Summary) -> List[str]:
    results = summary.results
    bench = results.benchmark['demo']
    accuracy = dict(
        dense=results.dense.accuracy,
        pruned=results.prune.accuracy,
        merged=results.transfer.merged_accuracy,
    )
    rows = []
    for name, what in (
        ('dense', 'HetDPTViT, all layers (last validation of its training)'),
        (
            'pruned',
            'gated checkpoint, closed gates (last '
            'validation of the prune run)',
        ),
        ('merged', 'merged checkpoint (plain dense net), `tools/test.py`'),
    ):
        model = bench.models[name]
        rows.append(
            [
                name,
                what,
                f'{accuracy[name]:.2f}',
                f'{accuracy[name] - accuracy["dense"]:+.2f}',
                f'{model.params:,}',
                f'{model.macs / 1e6:.2f} M',
                f'{model.speedup:.2f}x',
                f'{model.macs_speedup:.2f}x',
            ]
        )
    spec = results.prune.spec
    arch = results.dense.arch
    merge_exact = summary.claim('merge_exact')
    lines = [
        '## Classification: dense vs pruned vs merged',
        '',
        f'Demo ViT `{json.dumps(arch.get("arch"))}` at 32x32, patch '
        f'{arch["patch_size"]}, on the shapes val split '
        f'({summary.val_images} images). Speedups: '
        f'backbone forward, batch {bench.batch_size}, '
        f'{bench.threads} thread(s), median of {bench.repeats} '
        f'alternating repeats, {clock_name(bench.clock)} '
        '(`tools/benchmark.py`).',
        '',
    ]
    lines += table(
        [
            'model',
            'what',
            'top-1 (%)',
            'vs dense',
            'params',
            f'MACs/img ({bench.macs_convention})',
            'measured speedup',
            'MACs ratio',
        ],
        rows,
        'llrrrrrr',
    )
    lines += [
        '',
        f'Pruned and merged top-1 equal: '
        f'**{"yes" if merge_exact.holds else "NO"}** '
        f'({accuracy["pruned"]:.4f} vs {accuracy["merged"]:.4f}); '
        'drop from dense: '
        f'**{accuracy["dense"] - accuracy["merged"]:.2f} points**.',
        '',
        '### Chosen layers',
        '',
        f'MAP split the budget of {summary.budget} removed layers into '
        f'**{spec["n_attn"]} attention + {spec["n_act"]} GELU**; '
        '`HetDPTPruneHook` closed them one at a time, each time the '
        'open layer of that type with the lowest learned score '
        '(types never compared):',
        '',
    ]
    lines += table(
        [
            '#',
            'after iteration (epoch)',
            'type',
            'block closed',
            'scores m of the open layers of that type (block: m)',
        ],
        [
            [
                d['step'],
                f'{d["iter"]} ({d["epoch"]})',
                LAYER_TYPE_NAMES[d['kind']],
                d['index'],
                ', '.join(
                    f'{i}: {d["scores"][i]:+.4f}' for i in d['candidates']
                ),
            ]
            for d in results.prune.decisions
        ],
        'lrlrl',
    )
    lines += [
        '',
        f'Final spec: attention removed in blocks '
        f'{blocks(spec["attn_removed"])}; GELU removed (FFN merged to '
        f'one linear) in blocks {blocks(spec["act_removed"])}.',
    ]
    return lines


def map_section(summary: Summary) -> List[str]:
    results = summary.results
    fit = MAPFit.from_dict(results.fit.fit)
    allocation = Allocation.from_dict(results.fit.allocation)
    points = results.map.points
    lines = [
        '## MAP: points, fit, allocation',
        '',
        f'{len(points)} points from `MAPCollectHook` (one removal per '
        f'step chosen by the TE score, {results.map.interval} '
        'fine-tuning epoch(s) on a training subset per step, then '
        'evaluation), three schedules from the dense checkpoint:',
        '',
    ]
    lines += table(
        [
            'schedule',
            'step',
            'n_attn',
            'n_act',
            'a',
            't',
            'top-1 (%)',
            'attention removed',
            'GELU removed',
            f'MACs speedup ({summary.macs_convention})',
        ],
        [
            [
                p['schedule'],
                p['step'],
                p['n_attn'],
                p['n_act'],
                f'{float(p["a"]):.3f}',
                f'{float(p["t"]):.3f}',
                f'{float(p["accuracy"]):.2f}',
                p['removed_attn'] or '-',
                p['removed_act'] or '-',
                f'{s:.2f}x',
            ]
            for p, s in zip(points, summary.point_speedups)
        ],
        'lrrrrrrllr',
    )
    lines += [
        '',
        'A point also holds the fine-tuning of all its steps (it '
        'can end above the dense model); every split of one budget '
        "had as many steps, so that training shifts the budget's "
        'candidates by about as much and leaves their order (the '
        'argmax) as it is.',
    ]
    rows = []
    for score in fit.scores:
        mark = ' (chosen)' if score.degree == fit.degree else ''
        if score.skipped:
            rows.append(
                [
                    f'{score.degree}{mark}',
                    score.n_terms,
                    '-',
                    '-',
                    '-',
                    f'skipped: {score.skipped}',
                ]
            )
        else:
            rows.append(
                [
                    f'{score.degree}{mark}',
                    score.n_terms,
                    f'{score.cv_mae:.3f}',
                    f'{score.cv_rmse:.3f}',
                    f'{score.train_rmse:.3f}',
                    '',
                ]
            )
    lines += ['', 'Degree by leave-2-out cross-validation:', '']
    lines += table(
        ['degree', 'terms', 'CV MAE', 'CV RMSE', 'train RMSE', 'note'],
        rows,
        'lrrrrl',
    )
    point_spread = statistics.pstdev(p.accuracy for p in fit.points)
    best = allocation.best
    lines += [
        '',
        f'CV RMSE of the chosen degree: **{fit.cv_rmse:.2f}** '
        f"points against a spread (standard deviation) of the points' "
        f'accuracies of **{point_spread:.2f}** ('
        + (
            f'ratio {fit.cv_rmse / point_spread:.2f}'
            if point_spread
            else 'all points equal: the model had not learnt the task'
        )
        + '). The chosen split '
        f'({best.n_attn} attention + {best.n_act} GELU) is '
        + (
            "**outside** the points' hull: MAP **extrapolates** there."
            if best.extrapolated
            else "**inside** the points' hull "
            '(interpolated, no extrapolation).'
        ),
    ]
    lines += [
        '',
        f'`{fit.format_polynomial()}`',
        '',
        f'Allocation of budget {summary.budget} at depth '
        f'{results.dense.depth} (bounds `{results.fit.bounds}`; `*` = '
        'argmax):',
        '',
        '```',
        allocation.format_table(),
        '```',
        '',
        '![MAP surface](map/map_fit.png)',
    ]
    return lines


def dense_prediction_section(summary: Summary) -> List[str]:
    transfer = summary.results.transfer
    rows = []
    for key, title, metric, label, scale in DENSE_PREDICTION:
        run = getattr(transfer, key)
        rows.append(
            [
                title,
                label,
                f'{scale * run.before[metric]:.1f}',
                f'{scale * run.after[metric]:.1f}',
                f'{run.loss_first:.3f} -> {run.loss_last:.3f}',
                run.iterations,
            ]
        )
    lines = [
        '## Transfer: DETR and UperNet on the pruned, merged backbone',
        '',
        'Both take the merged classifier checkpoint as backbone '
        '(spec from its meta). "Before" is the training run\'s '
        'validation before its first step (`tools/train.py '
        '--validate-first`): the pruned backbone with the neck and heads '
        'as initialised; "after" is its validation at the end.',
        '',
    ]
    lines += table(
        [
            'model',
            'metric',
            'before training',
            'after training',
            'training loss (first -> last logged)',
            'iterations',
        ],
        rows,
        'llrrlr',
    )
    # COCO reports -1 for an area range without objects.
    lines += [
        '',
        'DETR COCO metrics after training: '
        + ', '.join(
            f'{k.split("/")[-1]} {100 * v:.1f}'
            for k, v in transfer.detr.after.items()
            if k.startswith('coco/bbox_') and isinstance(v, float) and v >= 0
        )
        + '.',
        'UperNet after training: '
        + ', '.join(
            f'{k} {v:.1f}'
            for k, v in transfer.upernet.after.items()
            if isinstance(v, float)
        )
        + '.',
        '',
        '![training losses](losses.png)',
    ]
    return lines


def plus_section(summary: Summary) -> List[str]:
    plus = summary.results.plus
    widths = plus.widths
    (macs_before, macs_after), (params_before, params_after) = (
        plus.macs,
        plus.params,
    )
    lines = [
        '## HetDPT+: the merged model pruned in width',
        '',
        f'`tools/prune_width.py` (Torch-Pruning isomorphic pruning, '
        f'magnitude importance, channel ratio {plus.ratio}) on the '
        f'merged classifier, then {plus.epochs} epoch(s) '
        'of fine-tuning; DETR and UperNet build on the result with '
        'their demo configs unchanged (necks take its embedding width) '
        'and are tested untrained.',
        '',
    ]
    lines += table(
        ['what', 'result'],
        [
            [
                f'MACs / image (classifier, {plus.macs_convention})',
                f'{macs_before:,} -> {macs_after:,} '
                f'({macs_before / macs_after:.2f}x fewer)',
            ],
            ['parameters', f'{params_before:,} -> {params_after:,}'],
            ['embedding width', str(widths['embed_dims'])],
            ['heads per block', str(widths['num_heads'])],
            ['FFN hidden per block (None: merged)', str(widths['ffn_hidden'])],
            [
                'top-1 pruned / fine-tuned',
                f'{plus.accuracy_before:.2f} % / {plus.accuracy:.2f} %',
            ],
            [
                'DETR bbox mAP / UperNet mIoU, untrained on it',
                f'{100 * plus.detr["coco/bbox_mAP"]:.1f} / '
                f'{plus.upernet["mIoU"]:.1f}',
            ],
        ],
        'll',
    )
    lines += ['', '![widths per block](vit-demo_digits_plus/widths.png)']
    return lines


def benchmark_section(summary: Summary) -> List[str]:
    lines = ['## Benchmark (`tools/benchmark.py`)', '']
    for key in ('demo', 'context'):
        bench = summary.results.benchmark.get(key)
        if bench:
            lines += [bench.markdown.strip(), '']
    return lines


def split_verdict(summary: Summary) -> str:
    """The sentence on MAP's split against the other splits of the
    budget."""
    claim = summary.claim('map_split_most_accurate')
    numbers = claim.numbers
    rows = {row.name: row for row in summary.splits}
    ours = summary.splits[0]
    seeds = f'mean over {numbers["seeds"]} seed(s)'
    if numbers['best'] is None:
        verdict = (
            f"Every split of this budget is MAP's own "
            f'({ours.n_attn} + {ours.n_act}): nothing to compare.'
        )
    elif claim.holds:
        verdict = (
            f"**MAP's split is the most accurate** "
            f'({ours.mean:.2f} % against at best '
            f'{numbers["best_mean"]:.2f} % for the other splits, '
            f'{seeds}).'
        )
    elif ours.mean < numbers['best_mean']:
        verdict = (
            f"**MAP's split is not the most accurate here**: "
            f'{numbers["best"]} reaches {numbers["best_mean"]:.2f} % '
            f'against its {ours.mean:.2f} % ({seeds}).'
        )
    else:
        # A tie in accuracy is decided by measured speed.
        fastest = rows[numbers['fastest']]
        verdict = (
            f'**No split is more accurate: {ours.name} ties '
            f'with {", ".join(numbers["tied"])} '
            f'at {ours.mean:.2f} %** ({seeds}); '
            + (
                f'at equal accuracy {fastest.name} '
                f'({fastest.n_attn} + {fastest.n_act}) is '
                f'faster ({fastest.speedup:.2f}x against '
                f"{ours.speedup:.2f}x), so on this task MAP's "
                'split does not win.'
                if fastest.speedup > ours.speedup
                else "MAP's split is at least as fast."
            )
        )
    if numbers['own']:
        verdict += (
            f" ({', '.join(numbers['own'])} removes MAP's own "
            'counts here: the same split, not a rival.)'
        )
    if numbers['seeds'] > 1 and numbers['margins']:
        verdict += ' ' + seed_spread_reading(numbers['margins'])
    return verdict


def seed_spread_reading(margins) -> str:
    """Each lead of MAP's split against the seed spread, so that a reader
    sees which part of the verdict these seeds show."""
    parts = [
        f'{m["name"]}: {m["lead"]:+.2f} points against a spread of '
        f'±{m["spread"]:.2f}, '
        + ('beyond it' if abs(m['lead']) > m['spread'] else '**within it**')
        + f"; MAP's split the more accurate on {m['seeds_won']} of "
        f'{m["seeds"]} seeds'
        for m in margins
    ]
    return (
        "MAP's lead against the seed spread (the larger half range of the "
        'two): ' + '; '.join(parts) + '. A lead within the spread is not '
        'shown by these seeds.'
    )


def fit_check_reading(summary: Summary) -> str:
    """MAP's predictions of the compared splits against the measured
    accuracies: how far to trust the fit."""
    check = summary.fit_check
    order = (
        f'it ranks {check.ordered} of the {check.pairs} pair(s) of splits '
        'whose accuracies differ as measured'
        if check.pairs
        else 'the splits of different counts measure the same, so there is '
        'no ranking to check'
    )
    return (
        f"**MAP's own check**: its fit predicted the splits "
        f'{check.mean_error:+.2f} points off their measured mean on '
        f'average (mean absolute error {check.mean_abs_error:.2f}; the '
        'MAP points are measured after a short fine-tune, the splits after '
        'the full one, so the level may be offset: MAP decides by the '
        f'ranking); {order}.'
    )


def gradient_reading(summary: Summary) -> str:
    if summary.claim('gradient_disparity').holds:
        return (
            'GELU scores get the larger gradients, as in the paper: '
            'raw scores of the two types live on different scales, '
            'so ranking them together (the naive split below) is '
            'biased.'
        )
    return (
        '**Unlike in the paper**, attention scores get the '
        'larger gradients on this task and model.'
    )


def claims_section(summary: Summary) -> List[str]:
    """The paper's observations and the comparison that justifies MAP, as
    measured on the demo task."""
    results = summary.results
    recovery = results.recovery
    ratio = summary.claim('gradient_disparity').numbers['ratio']
    lines = [
        '## Why heterogeneity-aware allocation: the claims on this task',
        '',
        '### 1. Gradient disparity',
        '',
        'Mean |dL/dm| of the gate scores of the open layers of each '
        'type, logged by `HetDPTPruneHook(log_score_grads=True)` during '
        "the MAP split's prune run (seed "
        f'{results.compare.seeds[0]}), averaged over the logged '
        'iterations:',
        '',
    ]
    lines += table(
        [
            'type',
            'mean |dL/dm|',
            'median of the logged values',
            'logged values',
        ],
        [
            [
                LAYER_TYPE_NAMES[kind],
                f'{g.mean:.3g}',
                f'{g.median:.3g}',
                g.count,
            ]
            for kind, g in summary.gradients.items()
        ],
        'lrrr',
    )
    lines += [
        '',
        f'GELU / attention: **{ratio:.2f}x**. ' + gradient_reading(summary),
        '',
        '![gate-score gradients](score_grads.png)',
        '',
        '### 2. Recovery asymmetry',
        '',
        'From the dense model, remove the one layer the TE score '
        'chose first (the first step of the MAP schedules), validate '
        'at once (`tools/train.py --validate-first`), then fine-tune '
        '(all layers, the dense recipe with pos_embed at 1x) and '
        'validate after every epoch:',
        '',
    ]
    epochs = max(len(run.after_epochs) for run in recovery.values())
    lines += table(
        ['removed', 'at once']
        + [f'after {e} epoch(s)' for e in range(1, epochs + 1)],
        [
            [
                f'{LAYER_TYPE_NAMES[kind]} of block {run.block}',
                f'{run.at_once:.2f}',
            ]
            + [f'{acc:.2f}' for acc in run.after_epochs]
            for kind, run in recovery.items()
        ],
    )
    lines += [
        '',
        f'Dense: {results.dense.accuracy:.2f} %.',
        '',
        '![recovery](recovery.png)',
        '',
        '### 3. The same budget, four allocations',
        '',
        f"Budget {summary.budget}: MAP's split, "
        'attention only, GELU only and the naive split (the '
        "budget's lowest raw gate scores, both types ranked together, "
        'read when the MAP run closed its first layer). Every split is '
        'pruned by `HetDPTPruneHook` from the dense model with the '
        'same schedule and fine-tuning (within a type: the lowest '
        'score), once per seed, and validated at its end (gates '
        "closed: the merged model's function); speedups are "
        'measured on the merged backbone (`tools/benchmark.py`, '
        'settings as in the benchmark section). Accuracy: mean ± half '
        'the range over the seeds. Where the naive ranking splits the '
        'budget differently for different seeds, each of its splits '
        'is a row of its own.',
        '',
    ]
    lines += table(
        [
            'split',
            'attention + GELU removed',
            'top-1 (%)',
            "MAP's prediction (%)",
            'per seed',
            'measured speedup',
            f'MACs ratio ({summary.macs_convention})',
        ],
        [
            [
                row.name,
                f'{row.n_attn} + {row.n_act}',
                spread(row.accuracies),
                f'{row.predicted:.2f}'
                + (' (extrapolated)' if row.extrapolated else ''),
                ', '.join(f'{a:.2f}' for a in row.accuracies),
                f'{row.speedup:.2f}x',
                f'{row.macs_speedup:.2f}x',
            ]
            for row in summary.splits
        ],
    )
    lines += [
        '',
        'Naive ranking per seed (scores m when the first layer '
        'closed): '
        + '; '.join(
            f'seed {seed}: attention {blocks(n.removed[ATTN])}, '
            f'GELU {blocks(n.removed[ACT])}'
            for seed, n in results.compare.naive.items()
        )
        + '.',
        '',
        split_verdict(summary),
        '',
        fit_check_reading(summary),
        '',
        '![comparison](comparison.png)',
    ]
    return lines


# ------------------------------------------------------------ report
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
            tome_summary_row(summary.tome),
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
    lines += tome_section(results.tome, summary.tome) + ['']
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


def verdicts(summary: Summary) -> Dict[str, Any]:
    """The report's statements, for ``summary.json``."""
    return dict(
        split=split_verdict(summary),
        tome=None
        if summary.tome is None
        else tome_verdicts(summary.results.tome, summary.tome),
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
