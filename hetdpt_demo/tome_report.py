"""The token-merging part of the demo report (the paper's Fig. 8 on the
demo task, ``removed_attn``, DETR and UperNet with ToMe) in words, from
the comparison computed as data (:mod:`.tome_claims`): the report's
section (:func:`tome_section`) and its statements (:func:`tome_verdicts`),
which ``summary.json`` keeps too."""

from typing import Any, Dict, List, Optional

from .report_format import clock_name
from .results import CurvePoint, TomeResult
from .tome_claims import (
    FIG8_METHODS,
    PAPER_DROP,
    PAPER_FIG8,
    Fig8Method,
    TomeComparison,
    by_model,
    envelope,
)

#: How the report names the models of the comparison.
TOME_MODEL_NAMES = dict(
    dense='dense + ToMe',
    hetdpt='HetDPT (MAP split) + ToMe',
    attn_only='attention-only split + ToMe',
    attn_only_none='attention-only split + ToMe, removed_attn=none',
)
TRANSFER_NAMES = dict(
    detr=('DETR (toy COCO)', 'bbox mAP', 100),
    upernet=('UperNet (toy ADE20K)', 'mIoU', 1),
)


def comparison_verdict(tome: TomeResult, comparison: TomeComparison) -> str:
    """HetDPT + ToMe against dense + ToMe, ToMe alone, and the front."""
    faster = comparison.claims[0]
    dense = by_model(tome.points)['dense']
    verdict = (
        f'HetDPT + ToMe is **'
        f'{"faster" if faster.holds else "not always faster"}** than '
        f'dense + ToMe at equal r: '
        f'{faster.numbers["min_speedup"]:.2f}x to '
        f'{faster.numbers["max_speedup"]:.2f}x measured throughput '
        "(not the paper's comparison: its 1.5-1.6x is at comparable "
        'accuracy drops, read off the curves in the Fig. 8 section below).'
    )
    top, plain = dense[max(tome.r)], dense[0]
    verdict += (
        f' ToMe alone (dense, r={top.r} against r=0): '
        f'{top.throughput / plain.throughput:.2f}x measured, '
        f'{plain.macs / top.macs:.2f}x fewer MACs, '
        f'{top.accuracy - plain.accuracy:+.2f} points.'
    )
    front = comparison.front
    counts = {m: sum(p.model == m for p in front) for m in ('dense', 'hetdpt')}
    return verdict + (
        f' Of the {2 * len(tome.r)} points, the accuracy / '
        f'throughput front (no point both more accurate and faster) '
        f'holds {counts["hetdpt"]} HetDPT and {counts["dense"]} dense '
        'point(s): '
        + ', '.join(f'{TOME_MODEL_NAMES[p.model]} r={p.r}' for p in front)
        + '.'
    )


def removed_attn_verdict(comparison: TomeComparison) -> str:
    """Which merges better in blocks whose attention was removed: the
    normed tokens ('norm', more merging) or nothing ('none'), and the
    front of the two."""
    rows = comparison.removed_attn
    if not rows:
        verdict = 'No r > 0 was measured.'
    else:
        accuracy = sum(
            row.norm_accuracy - row.none_accuracy for row in rows
        ) / len(rows)
        speed = [row.norm_speedup for row in rows]
        verdict = (
            f"At equal r, `removed_attn='norm'` merges in every "
            f'block and runs {min(speed):.2f}x to {max(speed):.2f}x '
            f"as fast as `'none'`, at {accuracy:+.2f} points of "
            'accuracy on average (norm - none).'
        )
    return verdict + (
        ' Accuracy / throughput front of the two: '
        + ', '.join(
            f'{p.removed_attn} r={p.r} ({p.accuracy:.2f} % at '
            f'{p.throughput:,.0f} img/s)'
            for p in comparison.removed_attn_front
        )
        + '.'
    )


def ratio_range(rows) -> str:
    if not rows:
        return 'not read (the curves share no accuracy)'
    ratios = [row.ratio for row in rows]
    return f'{min(ratios):.2f}x to {max(ratios):.2f}x'


def fig8_verdict(reading: Fig8Method) -> str:
    """One method's ratios on the demo beside the paper's, named as such."""
    name = FIG8_METHODS[reading.method]
    hetdpt, dense, where = PAPER_FIG8[reading.method]
    at_drop = reading.at_paper_drop
    return (
        f'HetDPT + {name} over dense + {name}, measured throughput read off '
        f'the envelopes: at equal accuracy '
        f'{ratio_range(reading.equal_accuracy)}; at equal accuracy drop '
        f'{ratio_range(reading.equal_drop)}; at a {PAPER_DROP}-point drop '
        + (
            f'{at_drop.ratio:.2f}x ({at_drop.hetdpt_throughput:,.0f} vs '
            f'{at_drop.dense_throughput:,.0f} img/s)'
            if at_drop
            else 'not read (beyond a curve)'
        )
        + f'. The paper (DeiT-B on a GPU, Fig. 8, docs/method.md): HetDPT + '
        f'{name} {hetdpt} vs dense + {name} {dense} img/s {where} '
        f'({hetdpt / dense:.2f}x)'
        + (
            '; "under comparable accuracy drops ... 1.5-1.6x".'
            if reading.method == 'tome'
            else '.'
        )
    )


def _curve_table(points: List[CurvePoint], front) -> List[str]:
    lines = [
        '| model | setting | top-1 (%) | img/s | MACs/img | on the envelope |',
        '| --- | --- | ---: | ---: | ---: | :---: |',
    ]
    for p in sorted(points, key=lambda p: (p.model, -p.accuracy)):
        lines.append(
            f'| {p.model} | {p.setting} | {p.accuracy:.2f} | '
            f'{p.throughput:,.0f} | {p.macs / 1e6:.2f} M | '
            f'{"yes" if any(p is q for q in front) else ""} |'
        )
    return lines


def _ratio_table(title: str, rows, unit: str) -> List[str]:
    return [
        f'| {title} | dense img/s | HetDPT img/s | HetDPT / dense |',
        '| ---: | ---: | ---: | ---: |',
    ] + [
        f'| {row.level:.2f}{unit} | {row.dense_throughput:,.0f} | '
        f'{row.hetdpt_throughput:,.0f} | {row.ratio:.2f}x |'
        for row in rows
    ]


def envelope_name(point: CurvePoint) -> str:
    if point.method == 'gtp':
        return 'GTP-ViT'
    return TOME_MODEL_NAMES[point.model]


def fig8_section(tome: TomeResult, comparison: TomeComparison) -> List[str]:
    """The Fig. 8 part of the token-merging section: both methods, both
    curves, the ratios at equal accuracy and at equal drop."""
    lines = [
        '### Fig. 8 as the paper draws it: speed at equal accuracy',
        '',
        'Dense and HetDPT (MAP split, merged) with ToMe at constant r and at '
        "ToMe's (r, inflect) schedules (`token_merge=dict(r=R, "
        'inflect=I)`), and with GTP-ViT (`graph_propagation='
        'dict(num_prop=N)`, dense classification form; where blocks x '
        'num_prop exceed the 15 patches a block may remove, the later '
        "blocks meet the library's cap and keep one patch). Top-1 and "
        'throughput as in the table above (one evaluation per point, '
        'every point in the same timing rotation). Each curve is made '
        'monotone as its upper envelope '
        '(the points no other point of the same model and method beats in '
        'both); the ratios are read off the two envelopes by linear '
        'interpolation, at every accuracy (equal accuracy) or drop below '
        "the model's own r=0 accuracy (equal drop) that an envelope point "
        'has and both curves reach.',
        '',
        '![Fig. 8](fig8.png)',
    ]
    for reading in comparison.fig8:
        front = [p for curve in reading.envelopes.values() for p in curve]
        points = [
            p
            for p in tome.curves
            if p.method == reading.method and p.model in ('dense', 'hetdpt')
        ]
        lines += (
            ['', f'#### {FIG8_METHODS[reading.method]}', '']
            + _curve_table(points, front)
            + ['']
            + _ratio_table('equal top-1', reading.equal_accuracy, ' %')
            + ['']
            + _ratio_table('equal drop', reading.equal_drop, ' points')
            + ['', fig8_verdict(reading)]
        )
    removed = [p for p in tome.curves if p.model == 'attn_only']
    rivals = [
        CurvePoint(
            model=p.model,
            method='tome',
            setting=f'r={p.r}',
            accuracy=p.accuracy,
            throughput=p.throughput,
            macs=p.macs,
        )
        for p in tome.points
        if p.model in ('attn_only', 'attn_only_none') and p.r
    ]  # r=0 is the model of num_prop=0
    front = envelope(removed + rivals)
    blocks = ', '.join(map(str, tome.attn_only.attn_removed))
    return (
        lines
        + [
            '',
            '#### GTP-ViT in blocks whose attention was removed',
            '',
            'They have no attention map to rank the patches by, so they '
            "propagate nothing (the library's choice, as ToMe's "
            "`removed_attn='none'`). Measured on the attention-only split "
            f'(attention removed in blocks {blocks}), against ToMe there '
            "(attn_only: `'norm'`, attn_only_none: `'none'`):",
            '',
        ]
        + _curve_table(removed + rivals, front)
        + [
            '',
            'Its upper envelope: '
            + ', '.join(f'{envelope_name(p)} {p.setting}' for p in front)
            + '.',
        ]
    )


def tome_verdicts(
    tome: TomeResult, comparison: TomeComparison
) -> Dict[str, Any]:
    """The token-merging section's statements."""
    return dict(
        equal_r=comparison_verdict(tome, comparison),
        removed_attn=removed_attn_verdict(comparison),
        fig8={r.method: fig8_verdict(r) for r in comparison.fig8},
    )


def tome_summary_row(comparison: Optional[TomeComparison]) -> List[str]:
    """The report summary's row on token merging (``None``: skipped)."""
    what = 'HetDPT + ToMe vs dense + ToMe, measured throughput at equal r'
    if comparison is None:
        return [what, 'not measured in the --quick demo']
    return [
        what,
        ', '.join(
            f'r={row.r}: {row.speedup:.2f}x ({row.hetdpt_accuracy:.2f} '
            f'vs {row.dense_accuracy:.2f} %)'
            for row in comparison.equal_r
        ),
    ]


def _fig8_table(tome: TomeResult) -> List[str]:
    rows = by_model(tome.points)
    macs = f'MACs/img ({tome.timing.macs_convention})'
    lines = [
        '| r | '
        + ' | '.join(
            f'{TOME_MODEL_NAMES[m]}: top-1 (%) | img/s | {macs}'
            for m in ('dense', 'hetdpt')
        )
        + ' | HetDPT speedup |',
        '| ---: |' + ' ---: |' * 7,
    ]
    for r in tome.r:
        cells = []
        for model in ('dense', 'hetdpt'):
            p = rows[model][r]
            cells += [
                f'{p.accuracy:.2f}',
                f'{p.throughput:,.0f}',
                f'{p.macs / 1e6:.2f} M',
            ]
        speedup = rows['hetdpt'][r].throughput / rows['dense'][r].throughput
        cells.append(f'{speedup:.2f}x')
        lines.append(f'| {r} | ' + ' | '.join(cells) + ' |')
    return lines


def tome_section(
    tome: Optional[TomeResult], comparison: Optional[TomeComparison]
) -> List[str]:
    """The report's token-merging section (``None``: skipped)."""
    lines = ["## Token merging (ToMe): the paper's Fig. 8 on this task", '']
    if tome is None:
        return lines + [
            'Skipped in the `--quick` demo (the full demo tests '
            'and times the dense and HetDPT classifiers, DETR '
            'and UperNet with ToMe at several r).'
        ]
    timing = tome.timing
    lines += [
        'The dense classifier and the HetDPT merged classifier (MAP split), '
        'unchanged (no training), with `token_merge=dict(r=R)` in the '
        'backbone (`--cfg-options model.backbone.token_merge.r=R`, '
        'constant schedule; docs/user_guides/token_merge.md): top-1 on '
        'the val split, evaluated once per point in the demo process as '
        '`tools/test.py` evaluates (its config, data, preprocessor and '
        'checkpoint loading); throughput of the backbone forward, batch '
        f'{timing.batch_size}, {timing.threads} thread(s), median of '
        f'{timing.repeats} repeats, every model and r alternating in one '
        f'process, {clock_name(timing.clock)}. r=0 merges nothing '
        '(bit-identical to no merging).',
        '',
    ]
    lines += _fig8_table(tome)
    removed_blocks = ', '.join(map(str, tome.attn_only.attn_removed))
    lines += [
        '',
        comparison_verdict(tome, comparison),
        '',
        '![ToMe](tome.png)',
        '',
        '### Blocks whose attention was removed',
        '',
        "They have no attention keys: `removed_attn='norm'` (the "
        "default) merges on their LN1-normed tokens, `'none'` "
        'merges nothing there. The MAP split removed attention in '
        + (
            f'blocks {", ".join(map(str, tome.map_attn_removed))}'
            if tome.map_attn_removed
            else 'no block (both settings are the same model there)'
        )
        + '; the two are compared on the attention-only split of the '
        f'same budget (seed {tome.attn_only.seed}, attention '
        f'removed in blocks {removed_blocks}), merged, same r and '
        f'timing as above (MACs {timing.macs_convention}):',
        '',
        '| r | norm: top-1 (%) | img/s | MACs/img | none: top-1 (%) | '
        'img/s | MACs/img | norm / none speed |',
        '| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
    ]
    lines += [
        f'| {row.r} | {row.norm_accuracy:.2f} | '
        f'{row.norm_throughput:,.0f} | '
        f'{row.norm_macs / 1e6:.2f} M | {row.none_accuracy:.2f} | '
        f'{row.none_throughput:,.0f} | '
        f'{row.none_macs / 1e6:.2f} M | {row.norm_speedup:.2f}x |'
        for row in comparison.removed_attn
    ]
    lines += [
        '',
        removed_attn_verdict(comparison),
        '',
        '### DETR and UperNet with ToMe',
        '',
        'The trained DETR and UperNet of the transfer section, tested '
        'with ToMe in their backbone (tokens unmerged onto the full '
        'grid before the neck); speed: `tools/benchmark.py --config` '
        'with one config per r, alternating in one run, full model '
        '(settings below; speedup: paired median over r=0).',
        '',
        '| model | r | metric | MACs/img | img/s | speedup over r=0 |',
        '| --- | ---: | ---: | ---: | ---: | ---: |',
    ]
    for kind, run in tome.transfer.items():
        title, label, scale = TRANSFER_NAMES[kind]
        for point in run.points:
            lines.append(
                f'| {title} | {point.r} | {label} '
                f'{scale * point.metric:.1f} | '
                f'{point.macs / 1e6:.2f} M | '
                f'{point.throughput:,.0f} | '
                f'{point.speedup:.2f}x |'
            )
    lines += [''] + [
        f'{TRANSFER_NAMES[kind][0]}: {run.img_size[0]}x{run.img_size[1]}, '
        f'batch {run.batch_size}, {run.repeats} repeats, MACs '
        f'{run.macs_convention}.'
        for kind, run in tome.transfer.items()
    ]
    return lines + [''] + fig8_section(tome, comparison)
