"""The demo's report: ``report.md``, ``summary.json`` (measurements,
verdicts, the run) and two figures, from :func:`.results.collect` and
:mod:`.verdicts`."""

import json
import os
import time
from typing import Any, Dict, Mapping, Sequence

import numpy as np

from hetdpt_mm.fileio import atomic_write_text
from hetdpt_mm.visualization import image_bytes, new_figure, write_image

from . import verdicts
from .results import collect
from .stages import STAGES

METHODS = dict(none='none', tome='ToMe', gtp='GTP-ViT')
SETTING = dict(none='-', tome='r={}', gtp='num_prop={}')


def table(header: str, rows: Sequence[str]) -> str:
    """A markdown table of ``|``-separated header and rows."""
    rule = ' | '.join('---' for _ in header.split('|'))
    return '\n'.join(f'| {row} |' for row in [header, rule, *rows])


def pm(values) -> str:
    """Mean ± half range over the seeds."""
    return '{:.2f} ± {:.2f}'.format(*verdicts.spread(values))


def yes(flag: bool) -> str:
    return '**yes**' if flag else '**no**'


def counts(pair) -> str:
    return f'{pair[0]} + {pair[1]}'


def split_name(split: Mapping) -> str:
    return ', '.join(split['names']) or counts(split['counts'])


def cpu_model() -> str:
    try:
        with open('/proc/cpuinfo', encoding='utf-8') as file:
            lines = [x for x in file if x.startswith('model name')]
        return lines[0].split(':', 1)[1].strip()
    except (OSError, IndexError):
        return os.uname().machine


def run_info(demo) -> Dict[str, Any]:
    seconds = demo.seconds
    return dict(
        command=demo.options.command,
        cpu=cpu_model(),
        cores=os.cpu_count(),
        jobs=demo.options.jobs,
        threads=demo.options.threads,
        load_before=demo.load_before,
        load_after=os.getloadavg()[0],
        finished_at=time.strftime('%Y-%m-%dT%H:%M:%S'),
        wall_seconds=sum(v[0] for v in seconds.values()),
        cpu_seconds=sum(v[1] for v in seconds.values()),
        stages={
            k: dict(wall=seconds[k][0], cpu=seconds[k][1])
            for k in STAGES
            if k in seconds
        },
        commands=demo.jobs.commands,
    )


def dense_text(r, v, epochs: int) -> str:
    curve = ', '.join(f'{a:.2f} ({e})' for e, a in r['dense']['curve'])
    if 'trained_to_end' not in v:
        return f'top-1 (epoch): {curve}'
    return (
        f"top-1 (epoch): {curve}; given a prune run's "
        f'{epochs} epochs without removing a layer '
        f'{v["extra_epochs_gain"]:+.2f} points (seed spread ± '
        f'{v["extra_epochs_spread"]:.2f}): trained to the end '
        f'{yes(v["trained_to_end"])}; MAP points / splits above it beyond '
        f'that spread: {len(v["points_above_dense"])} / '
        f'{len(v["splits_above_dense"])}'
    )


def split_section(r, v) -> str:
    rows = []
    for split in sorted(r['splits'], key=lambda s: s['counts'], reverse=True):
        predicted = v['clipped'].get('{}+{}'.format(*split['counts']))
        if predicted is not None:
            predicted = f'{predicted:.2f}'
            if split['counts'] in v['above_dense']:
                predicted += f' (clipped: {split["predicted"]:.2f})'
            if split['extrapolated']:
                predicted += ', extrapolated'
        seeds = split['accuracy'].values()
        rows.append(
            f'{split_name(split)} | {counts(split["counts"])} | {pm(seeds)}'
            f' | {" / ".join(f"{x:.2f}" for x in seeds)} | '
            f'{predicted or "-"} | {split["speedup"]:.2f}x | '
            f'{split["macs_ratio"]:.2f}x'
        )
    pick = (
        '**the most accurate split measured**'
        if v['pick_is_best']
        else f'{v["gap"]:.2f} points below the best, {counts(v["best"])}: '
        f'**{"within" if v["pick_within_spread"] else "beyond"}** the seed '
        f'spread (± {v["tolerance"]:.2f})'
    )
    lines = [
        table(
            'split | attention + GELU removed | top-1 (%), mean ± half range '
            "| per seed | MAP's prediction | measured speedup | MACs ratio",
            rows,
        ),
        '',
        f"MAP's pick {counts(v['pick'])} is {pick}. Every split removing "
        f'layers ≥ {verdicts.ABOVE_CHANCE:g} points above chance '
        f'({r["task"]["chance"]:.0f} %): {yes(not v["below_chance"])}. '
        f'MAP orders {v["ordered_pairs"][0]} of the '
        f'{v["ordered_pairs"][1]} pairs of splits that differ beyond their '
        'spread as measured; a prediction above the dense model is clipped '
        'to it (MAP fits points of a short fine-tune: its order decides).',
    ]
    if r['naive']:
        lines.append(
            'The naive ranking (the lowest raw gate scores of both types '
            "together, at the MAP split's first removal) would remove "
            + ', '.join(
                f'{counts(c)} (seed {s})' for s, c in r['naive'].items()
            )
            + '.'
        )
    grads = r['main']['score_grads']
    if len(grads) == 2:
        lines.append(
            'Gradient disparity, mean |dL/dm| of the open gate scores in the '
            f'main run: attention {grads["attn"]:.3g}, GELU {grads["act"]:.3g}'
            f' ({grads["act"] / grads["attn"]:.2f}x).'
        )
    return '\n'.join(lines)


def map_section(r) -> str:
    points = [
        f'{p["schedule"]} | {p["step"]} | {p["removed_attn"] or "-"} | '
        f'{p["removed_act"] or "-"} | {float(p["accuracy"]):.2f}'
        for p in r['map']['points']
    ]
    cv = [
        ('**{}**' if c['degree'] == r['map']['degree'] else '{}').format(
            c['degree']
        )
        + f' | {"-" if c["cv_rmse"] is None else round(c["cv_rmse"], 2)} | '
        + (c['skipped'] or '')
        for c in r['map']['cv']
    ]
    spread = np.std([float(p['accuracy']) for p in r['map']['points']])
    return '\n\n'.join(
        [
            f'{len(points)} points from `MAPCollectHook` (one removal per '
            'step, chosen by the TE score, fine-tuned, evaluated):',
            table(
                'schedule | step | attention removed | GELU removed | '
                'top-1 (%)',
                points,
            ),
            "Degree by leave-2-out cross-validation (the points' standard "
            f'deviation: {spread:.2f}):',
            table('degree | CV RMSE | note', cv),
            '![MAP fit](map/map_fit.png)',
        ]
    )


def setting(point: Mapping) -> str:
    return SETTING[point['method']].format(point['value'])


def fig8_section(r, v) -> str:
    # A point is on HetDPT's front in its method's panel (no token
    # reduction: in either).
    front = {id(p) for m in v['methods'].values() for p in m['front']}
    rows = [
        f'{p["model"]} | {METHODS[p["method"]]} | {setting(p)} | '
        f'{p["accuracy"]:.2f} | {p["throughput"]:,.0f} | '
        f'{p["macs"] / 1e6:.2f} M | '
        + ('-' if p['model'] == 'dense' else yes(id(p) in front))
        for p in r['fig8']
    ]
    readings = [
        f'{METHODS[p["method"]]} | {setting(p)} | {p["accuracy"]:.2f} | '
        f'{p["throughput"]:,.0f} | {p["dense_throughput"]:,.0f} | '
        f'**{p["ratio"]:.2f}x**'
        for result in v['methods'].values()
        for p in result['readings']
    ]
    return '\n\n'.join(
        [
            table(
                'model | method | setting | top-1 (%) | img/s | MACs/img | '
                "on HetDPT's front (its panel)",
                rows,
            ),
            'HetDPT at equal accuracy, read only where two measured '
            'token-reduced points of the dense curve enclose a '
            'token-reduced HetDPT point (linear between them):',
            table(
                'method | HetDPT setting | top-1 (%) | HetDPT img/s | '
                'dense img/s there | HetDPT / dense',
                readings,
            )
            if readings
            else 'No HetDPT point lies between two dense ones.',
            '![Fig. 8](fig8.png)',
        ]
    )


def summary_rows(r, v, epochs: int):
    vs, main = v['splits'], r['main']
    rows = [
        f'the dense model | {dense_text(r, vs, epochs)}',
        f'splits ≥ 10 points above chance | {yes(not vs["below_chance"])}',
        f"MAP's pick vs the best split | {counts(vs['pick'])} vs "
        f'{counts(vs["best"])}: {vs["gap"]:.2f} points, within the spread '
        f'{yes(vs["pick_within_spread"])}',
        f'merged = gated top-1 | {yes(main["merged"] == main["gated"])} '
        f'({main["merged"]:.2f} %)',
    ]
    rows += [
        f'{kind} {t["metric"]} before → after | {t["before"]:.1f} → '
        f'{t["after"]:.1f}'
        for kind, t in r['transfer'].items()
    ]
    for method, result in v['fig8']['methods'].items():
        ratios = [p['ratio'] for p in result['readings']]
        rows.append(
            f'HetDPT + {METHODS[method]} on the front; HetDPT / dense at '
            f'equal accuracy | {yes(bool(result["on_front"]))}; '
            + (
                f'{min(ratios):.2f}x to {max(ratios):.2f}x ({len(ratios)})'
                if ratios
                else 'no enclosed point'
            )
        )
    return rows


def plot(points, xlabel: str) -> bytes:
    """Accuracy against speed: ``(label, style, xs, ys, yerr)`` curves."""
    fig = new_figure((6, 4))
    ax = fig.add_subplot()
    for label, style, xs, ys, yerr in points:
        ax.errorbar(xs, ys, yerr=yerr, fmt=style, capsize=3, label=label)
    ax.set(xlabel=xlabel, ylabel='top-1 (%)')
    ax.legend(fontsize=7)
    return image_bytes(fig)


def write_figures(r, work) -> None:
    splits = [
        (
            split_name(s),
            'o',
            [s['speedup']],
            *np.transpose([verdicts.spread(s['accuracy'].values())]),
        )
        for s in r['splits']
    ]
    write_image(work / 'splits.png', plot(splits, 'measured speedup'))
    curves = []
    for model, style in (('dense', 'o--'), ('hetdpt', 's-')):
        for method, colour in (('tome', 'b'), ('gtp', 'r')):
            curve = [
                p
                for p in r['fig8']
                if p['model'] == model and p['method'] in ('none', method)
            ]
            xs = [p['throughput'] for p in curve]
            ys = [p['accuracy'] for p in curve]
            label = f'{model} + {METHODS[method]}'
            curves.append((label, colour + style, xs, ys, None))
    write_image(work / 'fig8.png', plot(curves, 'images / s (backbone)'))


def write_report(demo) -> None:
    r, s = collect(demo), demo.settings
    v = dict(splits=verdicts.splits(r), fig8=verdicts.fig8(r['fig8']))
    run, main = run_info(demo), r['main']
    removed = ', '.join(
        f'{d["kind"]} of block {d["block"]}' for d in main['decisions']
    )
    transfer = [
        f'{kind} | {t["metric"]} | {t["before"]:.1f} | {t["after"]:.1f} | '
        f'{t["loss"][0]:.3f} → {t["loss"][1]:.3f}'
        for kind, t in r['transfer'].items()
    ]
    total = dict(wall=run['wall_seconds'], cpu=run['cpu_seconds'])
    stages = [
        f'{name} | {t["wall"]:.0f} | {t["cpu"]:.0f}'
        for name, t in [*run['stages'].items(), ('**total**', total)]
    ]
    quick = ' (--quick: its numbers mean nothing)' * demo.options.quick
    sections = [
        f'# HetDPT end-to-end demo{quick}',
        f'`{run["command"]}` on {run["cpu"]}, {run["cores"]} cores, up to '
        f'{run["jobs"]} jobs side by side: wall **{run["wall_seconds"]:.0f} '
        f's**, {run["cpu_seconds"]:.0f} CPU s; load average '
        f'{run["load_before"]:.2f} before, {run["load_after"]:.2f} after. '
        'Stages and configs: docs/user_guides/demo.md.',
        '## Summary',
        table(
            'claim | result', summary_rows(r, v, s.budget + s.finetune_epochs)
        ),
        f'## The budget of {s.budget}: the compared splits over '
        f'{len(s.seeds)} seed(s)',
        'Each split is pruned from the dense model by `HetDPTPruneHook` '
        f'(one removal per epoch, then {s.finetune_epochs} epochs of '
        'fine-tuning; "no removal": the same epochs, nothing removed), '
        'validated at the end (gates closed: the merged function). '
        f'Speedups: the seed-{s.seeds[0]} merged backbones, '
        f'`tools/benchmark.py`, batch {s.bench_batch}.',
        split_section(r, v['splits']),
        '![splits](splits.png)',
        '## MAP',
        map_section(r),
        '## The main run, merged, into DETR and UperNet',
        f'`{main["run"]}` removed, one per epoch: {removed or "nothing"}. '
        '`tools/test.py` of its merge (`tools/merge_ckpt.py`): '
        f'{main["merged"]:.2f} % (gated: {main["gated"]:.2f} %). DETR and '
        'UperNet train from the merged backbone (`--validate-first`):',
        table('model | metric | before | after | loss first → last', transfer),
        '## Fig. 8: token reduction on the dense and HetDPT classifiers',
        'Top-1: `tools/test.py` with the option; speed: one '
        '`tools/benchmark.py` per setting, both models alternating '
        f'(batch {s.bench_batch}, median of {s.bench_repeats}).',
        fig8_section(r, v['fig8']),
        '## Time per stage',
        table('stage | wall (s) | CPU (s)', stages),
        '## Commands',
        '```bash\n' + '\n'.join(run['commands']) + '\n```',
    ]
    atomic_write_text(demo.work / 'report.md', '\n\n'.join(sections) + '\n')
    summary = json.dumps(dict(run=run, results=r, verdicts=v), indent=1)
    atomic_write_text(demo.work / 'summary.json', summary)
    write_figures(r, demo.work)
