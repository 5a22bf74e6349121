"""What the demo measured, read back from the tools' outputs in its work
dir (:func:`collect`): checkpoints, validation scalars, MAP's points, fit
and allocation, test metrics and benchmark JSON."""

import csv
import json
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np

from hetdpt_mm.checkpoint.safe_load import load_checkpoint_file
from hetdpt_mm.fileio import read_json_file
from hetdpt_mm.hooks.prune_hook import STATE_KEY as PRUNE_STATE
from hetdpt_mm.pruning import rank_across_types

from .data import SHAPE_PAIR_CLASSES
from .settings import CONFIGS

MERGED_NAME = f'{Path(CONFIGS["prune"]).stem}_merged.pth'
#: The dense-prediction metrics, and their scale to percent (COCO's are
#: fractions).
TRANSFER_METRICS = dict(detr=('coco/bbox_mAP', 100), upernet=('mIoU', 1))


def label(counts) -> str:
    return f'attn{counts[0]}-act{counts[1]}'


def last_checkpoint(run_dir: Path) -> Path:
    """The checkpoint MMEngine saved last in ``run_dir``."""
    marker = run_dir / 'last_checkpoint'
    if not marker.is_file():
        raise FileNotFoundError(f'no checkpoint in {run_dir} ({marker})')
    return Path(marker.read_text(encoding='utf-8').strip())


def merged_file(run_dir: Path) -> Path:
    """What a prune run's MergeCheckpointHook wrote."""
    return run_dir / MERGED_NAME


def map_pick(work: Path) -> Tuple[int, int]:
    best = read_json_file(work / 'map' / 'map_allocation.json', 'MAP')
    return best['full']['best']['n_attn'], best['full']['best']['n_act']


def scalars(run_dir: Path) -> List[Dict[str, Any]]:
    """The scalars MMEngine logged in ``run_dir``'s training run (the one
    timestamp directory whose records have a ``loss``)."""
    for path in sorted(Path(run_dir).glob('*/vis_data/scalars.json')):
        lines = path.read_text(encoding='utf-8').splitlines()
        records = [json.loads(line) for line in lines if line.strip()]
        if any('loss' in record for record in records):
            return records
    raise FileNotFoundError(f'no training scalars under {run_dir}')


def values(records, key: str) -> List:
    """The logged values of ``key``, in order."""
    return [record[key] for record in records if key in record]


def val_records(run_dir, metric: str = 'accuracy/top1') -> List[Dict]:
    """Every validation of the training run in ``run_dir``, in order."""
    return [r for r in scalars(run_dir) if metric in r]


def last_accuracy(run_dir: Path) -> float:
    """Top-1 of the run's last validation: its last checkpoint on the
    validation split (the demo's val and test splits are one)."""
    return val_records(run_dir)[-1]['accuracy/top1']


def test_metric(run_dir: Path, metric: str = 'accuracy/top1') -> float:
    return read_json_file(run_dir / 'test_metrics.json', 'metrics')[metric]


def prune_meta(run_dir: Path) -> Dict[str, Any]:
    """The HetDPTPruneHook state in the run's last checkpoint."""
    checkpoint = load_checkpoint_file(last_checkpoint(run_dir), mmap=True)
    return checkpoint['meta'][PRUNE_STATE]


def benchmark_speed(path: Path) -> Dict[str, Dict[str, float]]:
    """Per model of a ``tools/benchmark.py`` JSON: throughput, MACs and
    paired speedup over its first model."""
    result = read_json_file(path, 'benchmark')
    return {
        model['name']: dict(
            throughput=model['timing']['throughput'],
            macs=model['macs']['total'],
            speedup=model['speedup']['paired_median'],
            macs_ratio=model['speedup'].get('macs', 1.0),
        )
        for model in result['models']
    }


def collect(demo) -> Dict[str, Any]:
    """Everything the report states, from the work dir of ``demo``."""
    work, s = demo.work, demo.settings
    runs = demo.split_runs()
    main_name, classes = next(iter(runs)), len(SHAPE_PAIR_CLASSES)
    main = work / 'splits' / main_name
    with open(work / 'map' / 'map_points.csv', encoding='utf-8') as file:
        points = list(csv.DictReader(file))
    fit = read_json_file(work / 'map' / 'map_fit.json', 'MAP fit')
    allocation = read_json_file(work / 'map' / 'map_allocation.json', 'MAP')
    pick = map_pick(work)
    predicted = {
        (c['n_attn'], c['n_act']): c for c in allocation['full']['candidates']
    }
    speed = benchmark_speed(work / 'benchmark' / 'splits.json')
    names = [
        (pick, 'MAP'),
        ((s.budget, 0), 'attention only'),
        ((0, s.budget), 'GELU only'),
        ((0, 0), 'no removal'),
    ]
    splits: Dict[Tuple[int, int], Dict[str, Any]] = {}
    naive = {}
    for name, (counts, seed) in runs.items():
        split = splits.setdefault(
            counts,
            dict(
                counts=list(counts),
                names=[n for c, n in names if c == counts],
                accuracy={},
                predicted=predicted.get(counts, {}).get('predicted_accuracy'),
                extrapolated=predicted.get(counts, {}).get('extrapolated'),
                **speed.get(label(counts), dict(speedup=1.0, macs_ratio=1.0)),
            ),
        )
        split['accuracy'][str(seed)] = last_accuracy(work / 'splits' / name)
        if counts == pick:  # the naive ranking of this seed's first scores
            first = prune_meta(work / 'splits' / name)['decisions'][0]
            removed = rank_across_types(first['gate_scores'], s.budget)
            naive[str(seed)] = [len(removed['attn']), len(removed['act'])]
    meta, records = prune_meta(main), scalars(main)
    grads = {k: values(records, f'score_grad_{k}') for k in ('attn', 'act')}
    transfer = {}
    for kind, (metric, scale) in TRANSFER_METRICS.items():
        validations = val_records(work / kind, metric)
        losses = values(scalars(work / kind), 'loss')
        transfer[kind] = dict(
            metric=metric.split('/')[-1],
            before=scale * validations[0][metric],
            after=scale * validations[-1][metric],
            loss=[losses[0], losses[-1]],
        )
    return dict(
        task=dict(classes=classes, chance=100 / classes, depth=demo.depth),
        dense=dict(
            accuracy=last_accuracy(work / 'dense'),
            curve=[
                [r['step'], r['accuracy/top1']]
                for r in val_records(work / 'dense')
            ],
        ),
        map=dict(
            points=points,
            degree=fit['degree'],
            cv=fit['cv'],
            pick=list(pick),
            candidates=allocation['full']['candidates'],
        ),
        splits=list(splits.values()),
        naive=naive,
        main=dict(
            run=main_name,
            gated=last_accuracy(main),
            merged=test_metric(work / 'merged' / 'test'),
            decisions=[
                dict(kind=d['kind'], block=d['index'], epoch=d['epoch'])
                for d in meta['decisions']
            ],
            score_grads={k: float(np.mean(v)) for k, v in grads.items() if v},
        ),
        transfer=transfer,
        fig8=fig8_points(demo),
    )


def fig8_points(demo) -> List[Dict[str, Any]]:
    """Accuracy, throughput and MACs of both classifiers at every Fig. 8
    setting (value 0: no token reduction)."""
    work, s = demo.work, demo.settings
    out = work / 'fig8'
    base = benchmark_speed(out / 'bench-none.json')
    accuracy = dict(
        dense=last_accuracy(work / 'dense'),
        hetdpt=test_metric(work / 'merged' / 'test'),
    )
    points = [
        dict(model=m, method='none', value=0, accuracy=accuracy[m], **base[m])
        for m in ('dense', 'hetdpt')
    ]
    for method, value in s.fig8_points:
        speed = benchmark_speed(out / f'bench-{method}{value}.json')
        for model in ('dense', 'hetdpt'):
            point = dict(model=model, method=method, value=value)
            test = test_metric(out / f'{model}-{method}{value}')
            points.append(dict(point, accuracy=test, **speed[model]))
    return points
