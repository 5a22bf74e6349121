"""Results and the markdown report of the end-to-end demo
(:mod:`hetdpt_mm.apis.demo`).

The demo's stages run the project's tools as subprocesses; this module reads
what they wrote (metrics JSON of ``tools/test.py``, the validations in
MMEngine's
``vis_data/scalars.json``, the MAP points, fit and allocation, the benchmark
JSON) and turns the collected ``summary`` dict into ``report.md`` (its plots
are in :mod:`hetdpt_mm.visualization`).
"""
import json
import statistics
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

from ..pruning import Allocation, AnalyticCost, MAPFit
from ..spec import ACT, ATTN
from .demo_tome_report import tome_section, tome_summary_row

__all__ = ['read_json', 'train_scalars', 'val_records', 'scalar_curve',
           'map_speedups', 'duration', 'format_report', 'headline',
           'all_numbers']

#: How the report names the layer types of the prune decisions.
LAYER_TYPE_NAMES = {ATTN: 'attention', ACT: 'GELU'}


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
        records = [json.loads(line) for line in
                   scalars.read_text(encoding='utf-8').splitlines()
                   if line.strip()]
        if any('loss' in record for record in records):
            return records
    raise FileNotFoundError(f'no training scalars (*/vis_data/scalars.json '
                            f'with a loss) under {run_dir}')


def val_records(run_dir, metric: str = 'accuracy/top1'
                ) -> List[Dict[str, float]]:
    """The metrics of every validation of the training run in ``run_dir``
    (the records with ``metric``), in order, without MMEngine's timing
    fields."""
    return [{key: value for key, value in record.items()
             if key not in ('data_time', 'time', 'step')}
            for record in train_scalars(run_dir) if metric in record]


def scalar_curve(records: Iterable[Mapping[str, Any]],
                 key: str = 'loss') -> List[List[float]]:
    """``[[iteration, value], ...]`` of one logged scalar."""
    return [[int(record['iter']), float(record[key])] for record in records
            if key in record and 'iter' in record]


def map_speedups(points: Sequence[Mapping[str, Any]],
                 cost: AnalyticCost) -> List[float]:
    """Analytic MACs speedup (dense over pruned-and-merged) of each MAP
    point's removed counts."""
    return [cost.speedup(int(p['n_attn']), int(p['n_act'])) for p in points]


# ------------------------------------------------------------------- report
def _table(header: Sequence[str], rows: Iterable[Sequence[Any]],
           align: Optional[str] = None) -> List[str]:
    """Markdown table; ``align`` has one ``l``/``r`` per column."""
    align = align or 'l' + 'r' * (len(header) - 1)
    return (['| ' + ' | '.join(header) + ' |',
             '| ' + ' | '.join('---' if a == 'l' else '---:'
                               for a in align) + ' |'] +
            ['| ' + ' | '.join(str(cell) for cell in row) + ' |'
             for row in rows])


def duration(seconds: float) -> str:
    """``m:ss``."""
    minutes, seconds = divmod(int(round(seconds)), 60)
    return f'{minutes}:{seconds:02d}'


def _blocks(indices: Sequence[int]) -> str:
    return ', '.join(map(str, indices)) if indices else '-'


def _classification_section(summary: Mapping[str, Any]) -> List[str]:
    cls = summary['classification']
    bench = summary['benchmark']['demo']
    rows = []
    for name, what in (('dense', 'HetDPTViT, all layers (last validation '
                        'of its training)'),
                       ('pruned', 'gated checkpoint, closed gates (last '
                        'validation of the prune run)'),
                       ('merged', 'merged checkpoint (plain dense net), '
                        '`tools/test.py`')):
        model = bench['models'][name]
        accuracy = cls[name]['accuracy']
        rows.append([name, what, f'{accuracy:.2f}',
                     f'{accuracy - cls["dense"]["accuracy"]:+.2f}',
                     f'{model["params"]:,}', f'{model["macs"] / 1e6:.2f} M',
                     f'{model["speedup"]:.2f}x',
                     f'{model["macs_speedup"]:.2f}x'])
    spec = cls['spec']
    lines = ['## Classification: dense vs pruned vs merged', '',
             f'Demo ViT `{json.dumps(cls["arch"])}` at 32x32, patch '
             f'{cls["patch_size"]}, on the shapes val split '
             f'({cls["val_images"]} images). Speedups: '
             f'backbone forward, batch {bench["batch_size"]}, '
             f'{bench["threads"]} thread(s), median of {bench["repeats"]} '
             'alternating repeats, '
             + ('process CPU time' if bench['clock'] == 'process' else
                'wall clock') + ' (`tools/benchmark.py`).', '']
    lines += _table(['model', 'what', 'top-1 (%)', 'vs dense', 'params',
                     'MACs/img', 'measured speedup', 'MACs ratio'], rows,
                    'llrrrrrr')
    lines += ['', f'Pruned and merged top-1 equal: '
              f'**{"yes" if cls["pruned_equals_merged"] else "NO"}** '
              f'({cls["pruned"]["accuracy"]:.4f} vs '
              f'{cls["merged"]["accuracy"]:.4f}); drop from dense: '
              f'**{cls["dense"]["accuracy"] - cls["merged"]["accuracy"]:.2f} '
              'points**.', '',
              '### Chosen layers', '',
              f'MAP split the budget of {cls["budget"]} removed layers into '
              f'**{spec["n_attn"]} attention + {spec["n_act"]} GELU**; '
              '`HetDPTPruneHook` closed them one at a time, each time the '
              'open layer of that type with the lowest learned score '
              '(types never compared):', '']
    lines += _table(['#', 'after iteration (epoch)', 'type', 'block closed',
                     'scores m of the open layers of that type (block: m)'],
                    [[d['step'], f'{d["iter"]} ({d["epoch"]})',
                      LAYER_TYPE_NAMES[d['kind']], d['index'],
                      ', '.join(f'{i}: {d["scores"][i]:+.4f}'
                                for i in d['candidates'])]
                     for d in cls['decisions']], 'lrlrl')
    lines += ['', f'Final spec: attention removed in blocks '
              f'{_blocks(spec["attn_removed"])}; GELU removed (FFN merged to '
              f'one linear) in blocks {_blocks(spec["act_removed"])}.']
    return lines


def _map_section(summary: Mapping[str, Any]) -> List[str]:
    fit = MAPFit.from_dict(summary['map']['fit'])
    allocation = Allocation.from_dict(summary['map']['allocation'])
    depth = summary['classification']['depth']
    budget = summary['classification']['budget']
    points = summary['map']['points']
    lines = ['## MAP: points, fit, allocation', '',
             f'{len(points)} points from `MAPCollectHook` (one removal per '
             f'step chosen by the TE score, {summary["map"]["interval"]} '
             'fine-tuning epoch(s) on a training subset per step, then '
             'evaluation), three schedules from the dense checkpoint:', '']
    lines += _table(['schedule', 'step', 'n_attn', 'n_act', 'a', 't',
                     'top-1 (%)', 'attention removed', 'GELU removed',
                     'MACs speedup'],
                    [[p['schedule'], p['step'], p['n_attn'], p['n_act'],
                      f'{float(p["a"]):.3f}', f'{float(p["t"]):.3f}',
                      f'{float(p["accuracy"]):.2f}',
                      p['removed_attn'] or '-', p['removed_act'] or '-',
                      f'{s:.2f}x'] for p, s in
                     zip(points, summary['map']['point_speedups'])],
                    'lrrrrrrllr')
    lines += ['', 'A point also holds the fine-tuning of all its steps (it '
              'can end above the dense model); every split of one budget '
              'had as many steps, so that training shifts the budget\'s '
              'candidates by about as much and leaves their order (the '
              'argmax) as it is.']
    rows = []
    for score in fit.scores:
        mark = ' (chosen)' if score.degree == fit.degree else ''
        if score.skipped:
            rows.append([f'{score.degree}{mark}', score.n_terms, '-', '-',
                         '-', f'skipped: {score.skipped}'])
        else:
            rows.append([f'{score.degree}{mark}', score.n_terms,
                         f'{score.cv_mae:.3f}', f'{score.cv_rmse:.3f}',
                         f'{score.train_rmse:.3f}', ''])
    lines += ['', 'Degree by leave-2-out cross-validation:', '']
    lines += _table(['degree', 'terms', 'CV MAE', 'CV RMSE', 'train RMSE',
                     'note'], rows, 'lrrrrl')
    spread = statistics.pstdev(p.accuracy for p in fit.points)
    best = allocation.best
    lines += ['', f'CV RMSE of the chosen degree: **{fit.cv_rmse:.2f}** '
              f'points against a spread (standard deviation) of the points\' '
              f'accuracies of **{spread:.2f}** ('
              + (f'ratio {fit.cv_rmse / spread:.2f}' if spread else
                 'all points equal: the model had not learnt the task')
              + '). The chosen split '
              f'({best.n_attn} attention + {best.n_act} GELU) is '
              + ('**outside** the points\' hull: MAP **extrapolates** there.'
                 if best.extrapolated else '**inside** the points\' hull '
                 '(interpolated, no extrapolation).')]
    lines += ['', f'`{fit.format_polynomial()}`', '',
              f'Allocation of budget {budget} at depth {depth} (bounds '
              f'`{summary["map"]["bounds"]}`; `*` = argmax):', '', '```',
              allocation.format_table(),
              '```', '',
              '![MAP surface](map/map_fit.png)']
    return lines


def _spread(values: Sequence[float]) -> str:
    """``mean ± half range`` of one result over seeds."""
    mean = sum(values) / len(values)
    if len(values) == 1:
        return f'{mean:.2f} (1 seed)'
    return (f'{mean:.2f} ± {(max(values) - min(values)) / 2:.2f} '
            f'({len(values)} seeds)')


def _claims_section(summary: Mapping[str, Any]) -> List[str]:
    """The paper's observations and the comparison that justifies MAP, as
    measured on the demo task."""
    claims = summary['claims']
    grads, recovery = claims['score_grads'], claims['recovery']
    dense = summary['classification']['dense']['accuracy']
    lines = ['## Why heterogeneity-aware allocation: the claims on this '
             'task', '',
             '### 1. Gradient disparity', '',
             'Mean |dL/dm| of the gate scores of the open layers of each '
             'type, logged by `HetDPTPruneHook(log_score_grads=True)` during '
             'the MAP split\'s prune run (seed '
             f'{summary["compare"]["seeds"][0]}), averaged over the logged '
             'iterations:', '']
    lines += _table(['type', 'mean |dL/dm|', 'median of the logged values',
                     'logged values'],
                    [[LAYER_TYPE_NAMES[kind], f'{g["mean"]:.3g}',
                      f'{g["median"]:.3g}', g['count']]
                     for kind, g in grads['types'].items()], 'lrrr')
    if grads['ratio'] > 1:
        reading = ('GELU scores get the larger gradients, as in the paper: '
                   'raw scores of the two types live on different scales, '
                   'so ranking them together (the naive split below) is '
                   'biased.')
    else:
        reading = ('**Unlike in the paper**, attention scores get the '
                   'larger gradients on this task and model.')
    lines += ['', f'GELU / attention: **{grads["ratio"]:.2f}x**. ' + reading,
              '',
              '![gate-score gradients](score_grads.png)', '',
              '### 2. Recovery asymmetry', '',
              'From the dense model, remove the one layer the TE score '
              'chose first (the first step of the MAP schedules), validate '
              'at once (`tools/train.py --validate-first`), then fine-tune '
              '(all layers, the dense recipe with pos_embed at 1x) and '
              'validate after every epoch:', '']
    epochs = max(len(run['after_epochs']) for run in recovery.values())
    lines += _table(['removed', 'at once'] +
                    [f'after {e} epoch(s)' for e in range(1, epochs + 1)],
                    [[f'{LAYER_TYPE_NAMES[kind]} of block {run["block"]}',
                      f'{run["at_once"]:.2f}'] +
                     [f'{acc:.2f}' for acc in run['after_epochs']]
                     for kind, run in recovery.items()])
    lines += ['', f'Dense: {dense:.2f} %.', '',
              '![recovery](recovery.png)', '',
              '### 3. The same budget, four allocations', '',
              f'Budget {summary["classification"]["budget"]}: MAP\'s split, '
              'attention only, GELU only and the naive split (the '
              'budget\'s lowest raw gate scores, both types ranked together, '
              'read when the MAP run closed its first layer). Every split is '
              'pruned by `HetDPTPruneHook` from the dense model with the '
              'same schedule and fine-tuning (within a type: the lowest '
              'score), once per seed, and validated at its end (gates '
              'closed: the merged model\'s function); speedups are '
              'measured on the merged backbone (`tools/benchmark.py`, '
              'settings as in the benchmark section). Accuracy: mean ± half '
              'the range over the seeds. Where the naive ranking splits the '
              'budget differently for different seeds, each of its splits '
              'is a row of its own.', '']
    rows = []
    for split in claims['splits']:
        rows.append([split['name'], f'{split["n_attn"]} + {split["n_act"]}',
                     _spread(split['accuracies']),
                     ', '.join(f'{a:.2f}' for a in split['accuracies']),
                     f'{split["speedup"]:.2f}x',
                     f'{split["macs_speedup"]:.2f}x'])
    lines += _table(['split', 'attention + GELU removed', 'top-1 (%)',
                     'per seed', 'measured speedup', 'MACs ratio'], rows)
    naive = summary['compare']['naive']
    lines += ['', 'Naive ranking per seed (scores m when the first layer '
              'closed): ' + '; '.join(
                  f'seed {seed}: attention {_blocks(n["removed"][ATTN])}, '
                  f'GELU {_blocks(n["removed"][ACT])}'
                  for seed, n in naive.items()) + '.', '',
              claims['verdict'], '', '![comparison](comparison.png)']
    return lines


def _dense_prediction_section(summary: Mapping[str, Any]) -> List[str]:
    rows = []
    for key, title, metric, label in (
            ('detr', 'DETR (toy COCO)', 'coco/bbox_mAP', 'bbox mAP'),
            ('upernet', 'UperNet (toy ADE20K)', 'mIoU', 'mIoU')):
        run = summary[key]
        scale = 100 if metric.startswith('coco/') else 1
        rows.append([title, label,
                     f'{scale * run["before"][metric]:.1f}',
                     f'{scale * run["after"][metric]:.1f}',
                     f'{run["loss_first"]:.3f} -> {run["loss_last"]:.3f}',
                     run['iterations']])
    lines = ['## Transfer: DETR and UperNet on the pruned, merged backbone',
             '', 'Both take the merged classifier checkpoint as backbone '
             '(spec from its meta). "Before" is the training run\'s '
             'validation before its first step (`tools/train.py '
             '--validate-first`): the pruned backbone with the neck and heads '
             'as initialised; "after" is its validation at the end.', '']
    lines += _table(['model', 'metric', 'before training', 'after training',
                     'training loss (first -> last logged)', 'iterations'],
                    rows, 'llrrlr')
    detr_ap = summary['detr']['after']
    # COCO reports -1 for an area range without objects.
    lines += ['', 'DETR COCO metrics after training: ' + ', '.join(
        f'{k.split("/")[-1]} {100 * v:.1f}' for k, v in detr_ap.items()
        if k.startswith('coco/bbox_') and isinstance(v, float) and v >= 0)
        + '.',
        'UperNet after training: ' + ', '.join(
            f'{k} {v:.1f}' for k, v in summary['upernet']['after'].items()
            if isinstance(v, float)) + '.', '',
        '![training losses](losses.png)']
    return lines


def _plus_section(summary: Mapping[str, Any]) -> List[str]:
    plus = summary['plus']
    widths = plus['widths']
    (macs_before, macs_after), (params_before, params_after) = \
        plus['macs'], plus['params']
    lines = ['## HetDPT+: the merged model pruned in width', '',
             f'`tools/prune_width.py` (Torch-Pruning isomorphic pruning, '
             f'magnitude importance, channel ratio {plus["ratio"]}) on the '
             f'merged classifier, then {plus["epochs"]} epoch(s) '
             'of fine-tuning; DETR and UperNet build on the result with '
             'their demo configs unchanged (necks take its embedding width) '
             'and are tested untrained.', '']
    lines += _table(
        ['what', 'result'],
        [['MACs / image (classifier)',
          f'{macs_before:,} -> {macs_after:,} '
          f'({macs_before / macs_after:.2f}x fewer)'],
         ['parameters', f'{params_before:,} -> {params_after:,}'],
         ['embedding width', str(widths['embed_dims'])],
         ['heads per block', str(widths['num_heads'])],
         ['FFN hidden per block (None: merged)', str(widths['ffn_hidden'])],
         ['top-1 pruned / fine-tuned',
          f'{plus["accuracy_before"]:.2f} % / {plus["accuracy"]:.2f} %'],
         ['DETR bbox mAP / UperNet mIoU, untrained on it',
          f'{100 * plus["detr"]["coco/bbox_mAP"]:.1f} / '
          f'{plus["upernet"]["mIoU"]:.1f}']], 'll')
    lines += ['', '![widths per block](vit-demo_digits_plus/widths.png)']
    return lines


def _benchmark_section(summary: Mapping[str, Any]) -> List[str]:
    lines = ['## Benchmark (`tools/benchmark.py`)', '']
    for key in ('demo', 'context'):
        bench = summary['benchmark'].get(key)
        if bench:
            lines += [bench['markdown'].strip(), '']
    return lines


def format_report(summary: Mapping[str, Any]) -> str:
    """The markdown report of one demo run (``summary`` is what
    :class:`hetdpt_mm.apis.demo.Demo` collects; see ``summary.json`` next to
    the report)."""
    cls = summary['classification']
    bench = summary['benchmark']['demo']['models']
    merged = bench['merged']
    lines = [f'# HetDPT end-to-end demo ({summary["mode"]})', '',
             f'`{summary["command"]}` on {summary["machine"]}; total wall '
             f'time **{duration(summary["wall_seconds"])}** '
             f'({summary["wall_seconds"]:.0f} s); load average (1 min) '
             f'{summary["load_before"]:.2f} before, '
             f'{summary["load_after"]:.2f} after; up to {summary["jobs"]} '
             f'parallel job(s); threads per job: {summary["threads"]} (see '
             'the job table).', '',
             '## Summary', '']
    lines += _table(
        ['what', 'result'],
        [['task', 'shapes: do two distant glyphs have the same shape '
          f'(which) or different shapes; {cls["classes"]} classes, chance '
          f'{100 / cls["classes"]:.1f} %, 32x32, {cls["val_images"]} '
          'validation images'],
         ['dense top-1', f'{cls["dense"]["accuracy"]:.2f} % (1 seed, its '
          'spread not measured)'],
         ['pruned top-1 / merged top-1',
          f'{cls["pruned"]["accuracy"]:.2f} % / '
          f'{cls["merged"]["accuracy"]:.2f} %'],
         ['the same budget, mean top-1 over seeds', '; '.join(
             f'{split["name"]} {_spread(split["accuracies"])}'
             for split in summary['claims']['splits'])],
         ['removed layers (MAP split)',
          f'{cls["spec"]["n_attn"]} attention + {cls["spec"]["n_act"]} GELU '
          f'of {cls["depth"]} each'],
         ['merged backbone vs dense',
          f'{merged["speedup"]:.2f}x measured, {merged["macs_speedup"]:.2f}x '
          f'MACs, params {bench["dense"]["params"]:,} -> '
          f'{merged["params"]:,}'],
         ['DETR bbox mAP before -> after',
          f'{100 * summary["detr"]["before"]["coco/bbox_mAP"]:.1f} -> '
          f'{100 * summary["detr"]["after"]["coco/bbox_mAP"]:.1f}'],
         ['UperNet mIoU before -> after',
          f'{summary["upernet"]["before"]["mIoU"]:.1f} -> '
          f'{summary["upernet"]["after"]["mIoU"]:.1f}'],
         tome_summary_row(summary)], 'll')
    lines += ['', '![accuracy vs speedup](accuracy_vs_speedup.png)', '']
    lines += _claims_section(summary) + ['']
    lines += _classification_section(summary) + ['']
    lines += _map_section(summary) + ['']
    lines += _dense_prediction_section(summary) + ['']
    lines += _plus_section(summary) + ['']
    lines += _benchmark_section(summary)
    lines += tome_section(summary) + ['']
    lines += ['## Time per stage', '']
    cpu = sum(s.get('cpu_seconds', 0.0) for s in summary['stages'])
    lines += ['CPU time: user + system time of the stage\'s subprocesses '
              '(what its jobs cost, whatever else the machine runs).', '']
    lines += _table(['stage', 'wall time', 'seconds', 'CPU seconds'],
                    [[s['title'], duration(s['seconds']),
                      f'{s["seconds"]:.1f}',
                      f'{s.get("cpu_seconds", 0.0):.1f}']
                     for s in summary['stages']] +
                    [['**total**', f'**{duration(summary["wall_seconds"])}'
                      '**', f'{summary["wall_seconds"]:.1f}',
                      f'{cpu:.1f}']], 'lrrr')
    lines += ['', 'Jobs (subprocesses; a stage runs its independent jobs '
              'side by side):', '']
    lines += _table(['job', 'threads', 'wall time', 'seconds'],
                    [[name, summary['job_threads'].get(name, '-'),
                      duration(seconds), f'{seconds:.1f}']
                     for name, seconds in summary['job_seconds'].items()],
                    'lrrr')
    lines += ['', '## Commands', '',
              'Every stage ran one of these (from the repository root; '
              'full logs in `logs/`):', '', '```bash']
    lines += summary['commands'] + ['```', '']
    return '\n'.join(lines)


def headline(summary: Mapping[str, Any]) -> str:
    """The main numbers in a few lines, for the console."""
    cls = summary['classification']
    merged = summary['benchmark']['demo']['models']['merged']
    detr, upernet = summary['detr'], summary['upernet']
    return '\n'.join([
        f'  top-1: dense {cls["dense"]["accuracy"]:.2f} %, pruned '
        f'{cls["pruned"]["accuracy"]:.2f} %, merged '
        f'{cls["merged"]["accuracy"]:.2f} % (removed '
        f'{cls["spec"]["n_attn"]} attention + {cls["spec"]["n_act"]} GELU '
        'layers)',
        f'  merged backbone: {merged["speedup"]:.2f}x measured, '
        f'{merged["macs_speedup"]:.2f}x MACs',
        f'  DETR bbox mAP {100 * detr["before"]["coco/bbox_mAP"]:.1f} -> '
        f'{100 * detr["after"]["coco/bbox_mAP"]:.1f}; UperNet mIoU '
        f'{upernet["before"]["mIoU"]:.1f} -> {upernet["after"]["mIoU"]:.1f}',
        f'  wall time {duration(summary["wall_seconds"])}'])


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
