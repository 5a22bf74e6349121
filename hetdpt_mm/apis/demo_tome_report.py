"""The token-merging part of the demo report (the paper's Fig. 8 on the
demo task, ``removed_attn``, DETR and UperNet with ToMe): the comparisons
computed from the stage's results (:func:`tome_claims`) and the report's
section (:func:`tome_section`)."""
from typing import Any, Dict, List, Mapping, Sequence

#: How the report names the models of the comparison.
TOME_MODEL_NAMES = dict(dense='dense + ToMe',
                        hetdpt='HetDPT (MAP split) + ToMe',
                        attn_only='attention-only split + ToMe',
                        attn_only_none='attention-only split + ToMe, '
                        'removed_attn=none')
TRANSFER_NAMES = dict(detr=('DETR (toy COCO)', 'bbox mAP', 100),
                      upernet=('UperNet (toy ADE20K)', 'mIoU', 1))


def _by_model(points: Sequence[Mapping[str, Any]]
              ) -> Dict[str, Dict[int, Mapping[str, Any]]]:
    rows: Dict[str, Dict[int, Mapping[str, Any]]] = {}
    for point in points:
        rows.setdefault(point['model'], {})[point['r']] = point
    return rows


def pareto_front(points: Sequence[Mapping[str, Any]]
                 ) -> List[Mapping[str, Any]]:
    """The points no other point beats in both accuracy and throughput
    (at least as good in both, better in one), fastest first."""
    def beaten(p):
        return any(q['accuracy'] >= p['accuracy'] and
                   q['throughput'] >= p['throughput'] and
                   (q['accuracy'], q['throughput']) !=
                   (p['accuracy'], p['throughput']) for q in points)
    return sorted((p for p in points if not beaten(p)),
                  key=lambda p: -p['throughput'])


def tome_claims(tome: Mapping[str, Any]) -> Dict[str, Any]:
    """What the ToMe section states, from the stage's results: HetDPT +
    ToMe against dense + ToMe at equal r (the speedup and the accuracy
    gap), the front of the Fig. 8 points, and ``removed_attn`` 'norm'
    against 'none'."""
    rows = _by_model(tome['points'])
    dense, hetdpt = rows['dense'], rows['hetdpt']
    norm, none = rows['attn_only'], rows['attn_only_none']
    equal_r = [dict(r=r, dense_accuracy=dense[r]['accuracy'],
                    hetdpt_accuracy=hetdpt[r]['accuracy'],
                    speedup=hetdpt[r]['throughput'] /
                    dense[r]['throughput'])
               for r in tome['r']]
    speedups = [row['speedup'] for row in equal_r]
    faster = all(s > 1 for s in speedups)
    verdict = (f'HetDPT + ToMe is **'
               f'{"faster" if faster else "not always faster"}** than '
               f'dense + ToMe at equal r: {min(speedups):.2f}x to '
               f'{max(speedups):.2f}x measured throughput; the paper '
               'reports 1.5-1.6x on DeiT-B on a GPU.')
    top, plain = dense[max(tome['r'])], dense[0]
    verdict += (f' ToMe alone (dense, r={top["r"]} against r=0): '
                f'{top["throughput"] / plain["throughput"]:.2f}x measured, '
                f'{plain["macs"] / top["macs"]:.2f}x fewer MACs, '
                f'{top["accuracy"] - plain["accuracy"]:+.2f} points.')
    front = pareto_front([p for p in tome['points']
                          if p['model'] in ('dense', 'hetdpt')])
    counts = {m: sum(p['model'] == m for p in front)
              for m in ('dense', 'hetdpt')}
    verdict += (f' Of the {2 * len(tome["r"])} points, the accuracy / '
                f'throughput front (no point both more accurate and faster) '
                f'holds {counts["hetdpt"]} HetDPT and {counts["dense"]} dense '
                'point(s): ' + ', '.join(
                    f'{TOME_MODEL_NAMES[p["model"]]} r={p["r"]}'
                    for p in front) + '.')
    removed = [dict(r=r, norm_accuracy=norm[r]['accuracy'],
                    none_accuracy=none[r]['accuracy'],
                    norm_throughput=norm[r]['throughput'],
                    none_throughput=none[r]['throughput'],
                    norm_macs=norm[r]['macs'], none_macs=none[r]['macs'],
                    norm_speedup=norm[r]['throughput'] /
                    none[r]['throughput'])
               for r in tome['r'] if r]
    # r=0 of 'none' is the model of r=0 of 'norm' (nothing merged).
    removed_front = pareto_front([
        p for p in tome['points'] if p['model'] == 'attn_only' or
        (p['model'] == 'attn_only_none' and p['r'])])
    return dict(equal_r=equal_r, front=[point_key(p) for p in front],
                verdict=verdict, removed_attn=removed,
                removed_attn_front=[point_key(p) for p in removed_front],
                removed_attn_verdict=removed_attn_verdict(removed) + (
                    ' Accuracy / throughput front of the two: ' + ', '.join(
                        f'{p["removed_attn"]} r={p["r"]} '
                        f'({p["accuracy"]:.2f} % at '
                        f'{p["throughput"]:,.0f} img/s)'
                        for p in removed_front) + '.'))


def point_key(point: Mapping[str, Any]) -> str:
    return f'{point["model"]}-r{point["r"]}'


def removed_attn_verdict(rows: Sequence[Mapping[str, Any]]) -> str:
    """Which merges better in blocks whose attention was removed: the
    normed tokens ('norm', more merging) or nothing ('none')."""
    if not rows:
        return 'No r > 0 was measured.'
    accuracy = sum(row['norm_accuracy'] - row['none_accuracy']
                   for row in rows) / len(rows)
    speed = [row['norm_speedup'] for row in rows]
    return (f'At equal r, `removed_attn=\'norm\'` merges in every block and '
            f'runs {min(speed):.2f}x to {max(speed):.2f}x as fast as '
            f'`\'none\'`, at {accuracy:+.2f} points of accuracy on average '
            '(norm - none).')


def tome_summary_row(summary: Mapping[str, Any]) -> List[str]:
    """The report summary's row on token merging."""
    what = 'HetDPT + ToMe vs dense + ToMe, measured throughput at equal r'
    tome = summary['tome']
    if tome.get('skipped'):
        return [what, 'not measured in the --quick demo']
    return [what, ', '.join(
        f'r={row["r"]}: {row["speedup"]:.2f}x '
        f'({row["hetdpt_accuracy"]:.2f} vs {row["dense_accuracy"]:.2f} %)'
        for row in tome['claims']['equal_r'])]


def _fig8_table(tome: Mapping[str, Any]) -> List[str]:
    rows = _by_model(tome['points'])
    lines = ['| r | ' + ' | '.join(
        f'{TOME_MODEL_NAMES[m]}: top-1 (%) | img/s | MACs/img'
        for m in ('dense', 'hetdpt')) + ' | HetDPT speedup |',
        '| ---: |' + ' ---: |' * 7]
    for r in tome['r']:
        cells = []
        for model in ('dense', 'hetdpt'):
            p = rows[model][r]
            cells += [f'{p["accuracy"]:.2f}', f'{p["throughput"]:,.0f}',
                      f'{p["macs"] / 1e6:.2f} M']
        speedup = rows['hetdpt'][r]['throughput'] / rows['dense'][r][
            'throughput']
        cells.append(f'{speedup:.2f}x')
        lines.append(f'| {r} | ' + ' | '.join(cells) + ' |')
    return lines


def tome_section(summary: Mapping[str, Any]) -> List[str]:
    """The report's token-merging section."""
    tome = summary['tome']
    lines = ['## Token merging (ToMe): the paper\'s Fig. 8 on this task', '']
    if tome.get('skipped'):
        return lines + ['Skipped in the `--quick` demo (the full demo tests '
                        'and times the dense and HetDPT classifiers, DETR '
                        'and UperNet with ToMe at several r).']
    timing, claims = tome['timing'], tome['claims']
    lines += [
        'The dense classifier and the HetDPT merged classifier (MAP split), '
        'unchanged (no training), with `token_merge=dict(r=R)` in the '
        'backbone (`--cfg-options model.backbone.token_merge.r=R`, '
        'constant schedule; docs/user_guides/token_merge.md): top-1 by '
        '`tools/test.py` '
        'on the val split; throughput of the backbone forward, batch '
        f'{timing["batch_size"]}, {timing["threads"]} thread(s), median of '
        f'{timing["repeats"]} repeats, every model and r alternating in one '
        'process, ' + ('process CPU time' if timing['clock'] == 'process'
                       else 'wall clock') + '. r=0 merges nothing '
        '(bit-identical to no merging).', '']
    lines += _fig8_table(tome)
    removed_blocks = ', '.join(map(str, tome['attn_only']['attn_removed']))
    lines += ['', claims['verdict'], '', '![ToMe](tome.png)', '',
              '### Blocks whose attention was removed', '',
              'They have no attention keys: `removed_attn=\'norm\'` (the '
              'default) merges on their LN1-normed tokens, `\'none\'` '
              'merges nothing there. The MAP split removed attention in '
              + (f'blocks {", ".join(map(str, tome["map_attn_removed"]))}'
                 if tome['map_attn_removed'] else 'no block (both settings '
                 'are the same model there)') +
              '; the two are compared on the attention-only split of the '
              f'same budget (seed {tome["attn_only"]["seed"]}, attention '
              f'removed in blocks {removed_blocks}), merged, same r and '
              'timing as above:', '',
              '| r | norm: top-1 (%) | img/s | MACs/img | none: top-1 (%) | '
              'img/s | MACs/img | norm / none speed |',
              '| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |']
    lines += [f'| {row["r"]} | {row["norm_accuracy"]:.2f} | '
              f'{row["norm_throughput"]:,.0f} | '
              f'{row["norm_macs"] / 1e6:.2f} M | {row["none_accuracy"]:.2f} | '
              f'{row["none_throughput"]:,.0f} | '
              f'{row["none_macs"] / 1e6:.2f} M | {row["norm_speedup"]:.2f}x |'
              for row in claims['removed_attn']]
    lines += ['', claims['removed_attn_verdict'], '',
              '### DETR and UperNet with ToMe', '',
              'The trained DETR and UperNet of the transfer section, tested '
              'with ToMe in their backbone (tokens unmerged onto the full '
              'grid before the neck); speed: `tools/benchmark.py --config` '
              'with one config per r, alternating in one run, full model '
              '(settings below; speedup: paired median over r=0).', '',
              '| model | r | metric | MACs/img | img/s | speedup over r=0 |',
              '| --- | ---: | ---: | ---: | ---: | ---: |']
    for kind, run in tome['transfer'].items():
        title, label, scale = TRANSFER_NAMES[kind]
        for point in run['points']:
            lines.append(f'| {title} | {point["r"]} | {label} '
                         f'{scale * point["metric"]:.1f} | '
                         f'{point["macs"] / 1e6:.2f} M | '
                         f'{point["throughput"]:,.0f} | '
                         f'{point["speedup"]:.2f}x |')
    lines += [''] + [
        f'{TRANSFER_NAMES[kind][0]}: {run["img_size"][0]}x'
        f'{run["img_size"][1]}, batch {run["batch_size"]}, '
        f'{run["repeats"]} repeats.' for kind, run in tome['transfer'].items()]
    return lines
