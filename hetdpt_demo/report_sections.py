"""The result sections of the demo report: classification, MAP, transfer,
HetDPT+ and the benchmark, from the typed :class:`~.claims.Summary`."""

import json
import statistics
from typing import List

from hetdpt_mm.pruning import Allocation, MAPFit

from .claims import Summary
from .report_format import (
    LAYER_TYPE_NAMES,
    blocks,
    clock_name,
    table,
)

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
