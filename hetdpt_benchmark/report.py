"""The Markdown report of a benchmark result (``tools/benchmark.py --md``)."""

from typing import Any, Dict, List, Optional


def format_markdown(result: Dict[str, Any]) -> str:
    settings = result['settings']
    height, width = settings['img_size']
    clock = (
        ''
        if settings['clock'] == 'wall'
        else ', process CPU time (not elapsed)'
    )
    if settings.get('keep_freed_memory'):
        clock += ', freed memory kept (no page faults per batch)'
    lines = [
        f'### {result["task"]}: {height}x{width}, batch '
        f'{settings["batch_size"]}, {settings["dtype"]}, '
        f'{settings["device"]}, {settings["threads"]} threads{clock}',
        '',
        f'`{result["command"]}`',
        '',
    ]
    if settings.get('macs_convention'):
        lines += [
            f'MACs {settings["macs_convention"]} (the two token x '
            'token products of every attention; '
            'docs/user_guides/reproduce.md).',
            '',
        ]
    split = 'amdahl' in result
    lines += model_table(
        result,
        'timing',
        'speedup',
        'macs',
        'params',
        'end to end' if split else None,
    )
    if split:
        lines += [''] + model_table(
            result,
            'backbone_timing',
            'backbone_speedup',
            'backbone_macs',
            'backbone_params',
            'backbone only',
        )
        lines += [
            '',
            "Amdahl's law: the backbone's share of the "
            "baseline's end-to-end time and its backbone speedup "
            'bound the end-to-end speedup.',
            '',
            '| baseline -> model | backbone share | backbone speedup | '
            'Amdahl bound | end-to-end speedup | % of bound |',
            '| --- | ---: | ---: | ---: | ---: | ---: |',
        ]
        for row in result['amdahl']:
            lines.append(
                f'| {row["baseline"]} -> {row["model"]} | '
                f'{100 * row["backbone_share"]:.1f} % | '
                f'{row["backbone_speedup"]:.3f}x | '
                f'{row["bound"]:.3f}x | '
                f'{row["end_to_end_speedup"]:.3f}x | '
                f'{100 * row["fraction_of_bound"]:.1f} % |'
            )
    if 'runtimes' in result:
        lines += [
            '',
            'By runtime (paired speedups, median [min-max] over '
            "repeats; the largest difference of either model's "
            'outputs from PyTorch eager in fp32):',
            '',
            '| runtime | baseline ms | model ms | model vs baseline | '
            'model vs PyTorch eager model | max abs diff |',
            '| --- | ---: | ---: | ---: | ---: | ---: |',
        ]
        for row in result['runtimes']:
            gain, eager = row['speedup'], row['vs_torch']
            lines.append(
                f'| {row["runtime"]} ({row["model"]} vs {row["baseline"]}) '
                f'| {row["baseline_ms"]:.1f} | {row["ms"]:.1f} | '
                f'{paired_text(gain)} | '
                f'{"-" if eager is None else paired_text(eager)} | '
                f'{row["max_abs_diff"]:.2g} |'
            )
    if 'int8' in result:
        lines += [
            '',
            "INT8 (each runtime's INT8 graph: tools/export.py --int8 "
            'defaults; paired speedups, median [min-max] over repeats):',
            '',
            '| runtime | model | FP32 ms | INT8 ms | INT8 vs FP32 | '
            f'vs {result["int8"][0]["baseline"]} INT8 | % of MACs ratio | '
            f'vs {result["int8"][0]["baseline"]} FP32 |',
            '| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |',
        ]
        for row in result['int8']:
            gain = row.get('vs_baseline_int8')
            of_macs = (
                f'{100 * gain["of_macs"]:.1f} %'
                if gain and 'of_macs' in gain
                else '-'
            )
            lines.append(
                f'| {row["runtime"]} | {row["model"]} | '
                f'{row["fp32_ms"]:.1f} | {row["int8_ms"]:.1f} | '
                f'{paired_text(row["vs_fp32"])} | '
                f'{paired_text(gain) if gain else "-"} | {of_macs} | '
                + (
                    f'{paired_text(row["vs_baseline_fp32"])} |'
                    if gain
                    else '- |'
                )
            )
    analytic = [m for m in result['models'] if 'backbone_analytic_macs' in m]
    if analytic:
        lines += [
            '',
            f'Backbone MACs {settings["macs_convention"]}, '
            'mmengine FlopAnalyzer (matrix products) vs AnalyticCost: '
            + '; '.join(
                f'{m["name"]} {backbone_matmul(m):,} vs '
                f'{m["backbone_analytic_macs"]:,}'
                for m in analytic
            ),
        ]
    machine = result['machine']
    lines += [
        '',
        f'Machine: {machine["cpu"]}, {machine["logical_cores"]} '
        f'logical cores, torch {machine["torch"]}, '
        f'{machine["threads"]} threads'
        + (f', {machine["gpu"]}' if 'gpu' in machine else '')
        + (
            f'; load average {machine["loadavg"][0]} before, '
            f'{machine["loadavg_after"][0]} after'
            if 'loadavg_after' in machine
            else ''
        )
        + '.',
    ]
    for model in result['models']:
        for key, label in (
            ('profile', 'end to end'),
            ('backbone_profile', 'backbone'),
        ):
            if key in model:
                lines += [
                    '',
                    f'Profile of {model["name"]} ({label}), one batch:',
                    '',
                    '| operator | calls | self ms | share |',
                    '| --- | ---: | ---: | ---: |',
                ]
                lines += [
                    f'| `{row["op"]}` | {row["calls"]} | '
                    f'{row["self_ms"]:.1f} | '
                    f'{100 * row["share"]:.1f} % |'
                    for row in model[key]
                ]
    return '\n'.join(lines) + '\n'


def si(count: float) -> str:
    """``17.56 G``, ``3.10 M``: a count with a unit prefix."""
    for factor, prefix in ((1e12, 'T'), (1e9, 'G'), (1e6, 'M'), (1e3, 'k')):
        if count >= factor:
            return f'{count / factor:.2f} {prefix}'
    return f'{count:.0f}'


def paired_text(gain: Dict[str, Any]) -> str:
    """``1.360x [1.32-1.41]``: a paired speedup's median and range."""
    return (
        f'{gain["paired_median"]:.3f}x [{gain["paired_min"]:.2f}-'
        f'{gain["paired_max"]:.2f}]'
    )


def backbone_matmul(model: Dict[str, Any]) -> int:
    macs = model.get('backbone_macs') or model['macs']
    return macs['matmul']


def model_table(
    result: Dict[str, Any],
    timing_key: str,
    speedup_key: str,
    macs_key: str,
    params_key: str,
    title: Optional[str],
) -> List[str]:
    lines = [f'{title}:', ''] if title else []
    # Every table with MACs names their convention in its header.
    convention = result['settings'].get('macs_convention')
    macs = f'MACs/img ({convention})' if convention else 'MACs/img'
    lines += [
        f'| model | backbone | params (M) | {macs} | ms/batch, '
        'median [min-max] | img/s | speedup (of medians) | '
        'paired speedup, median [min-max] | speedup of best times | '
        'MACs ratio | speedup / MACs ratio |',
        '| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: '
        '| ---: | ---: |',
    ]
    for model in result['models']:
        timing = model[timing_key]
        gain = model[speedup_key]
        params = model.get(params_key, model['params'])
        macs = model.get(macs_key)
        macs_ratio = f'{gain["macs"]:.3f}x' if 'macs' in gain else '-'
        of_macs = (
            f'{100 * gain["of_macs"]:.1f} %' if 'of_macs' in gain else '-'
        )
        lines.append(
            f'| {model["name"]} | {model["description"]} | '
            f'{params / 1e6:.2f} | {si(macs["total"]) if macs else "-"} | '
            f'{timing["median_ms"]:.1f} [{timing["min_ms"]:.1f}-'
            f'{timing["max_ms"]:.1f}] | {timing["throughput"]:.2f} | '
            f'{gain["median"]:.3f}x | {paired_text(gain)} | '
            f'{gain["best"]:.3f}x | {macs_ratio} | {of_macs} |'
        )
    return lines
