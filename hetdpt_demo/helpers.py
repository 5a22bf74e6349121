"""Small pieces the demo's stages share: command-line options, hook
configs, reading run outputs, machine facts."""

import json
import pprint
import resource
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

from mmengine.config import Config

from hetdpt_benchmark.machine import machine_info
from hetdpt_mm.fileio import atomic_write_text

from .results import BenchmarkModel, BenchmarkRun
from .settings import CLS_DATA, DemoError


def classifier_schedule_options(
    epochs: Optional[int], train_images: Optional[int]
) -> List[str]:
    """``--cfg-options`` that shorten a classifier run (``None``: keep the
    config's value); validation runs once, at the end."""
    options = []
    if epochs is not None:
        options += [
            f'train_cfg.max_epochs={epochs}',
            f'train_cfg.val_interval={epochs}',
        ]
    if train_images is not None:
        options.append(f'train_dataloader.dataset.indices={train_images}')
    return options


def last_checkpoint(work_dir: Path) -> Path:
    """The checkpoint MMEngine saved last in ``work_dir``."""
    marker = work_dir / 'last_checkpoint'
    if not marker.is_file():
        raise DemoError(
            f'no checkpoint was saved in {work_dir} ({marker} is missing)'
        )
    return Path(marker.read_text().strip())


def write_hook_config(
    base: Path,
    hook_type: str,
    options: Mapping[str, Any],
    path: Path,
    unset: Sequence[str] = (),
) -> None:
    """Write a config to ``path`` that inherits ``base`` and gives its one
    ``hook_type`` hook ``options`` (and drops its keys ``unset``).

    ``--cfg-options custom_hooks.<i>.<key>=...`` would address the hook by
    its position in the list, silently reaching another hook when the
    config's list changes; here it is found by type.
    """
    hooks = [hook.to_dict() for hook in Config.fromfile(base).custom_hooks]
    matching = [hook for hook in hooks if hook['type'] == hook_type]
    if len(matching) != 1:
        raise DemoError(
            f'{base} has {len(matching)} {hook_type} hooks in '
            'custom_hooks; the demo configures exactly one'
        )
    for key in unset:
        matching[0].pop(key, None)
    matching[0].update(options)
    atomic_write_text(
        path,
        (
            f'# Written by the HetDPT demo: {base.name} with options of its '
            f'{hook_type}.\n_base_ = [{str(base)!r}]\n'
            f'custom_hooks = {pprint.pformat(hooks, sort_dicts=False)}\n'
        ),
    )


def condense_benchmark(result: Dict[str, Any], markdown: str) -> BenchmarkRun:
    """What the report needs from one ``tools/benchmark.py`` JSON."""
    settings = result['settings']
    return BenchmarkRun(
        batch_size=settings['batch_size'],
        threads=settings['threads'],
        repeats=settings['repeats'],
        img_size=settings['img_size'],
        clock=settings['clock'],
        macs_convention=settings['macs_convention'],
        markdown=markdown,
        models={
            model['name']: BenchmarkModel(
                params=model['params'],
                macs=model['macs']['total'],
                median_ms=model['timing']['median_ms'],
                speedup=model['speedup']['median'],
                macs_speedup=model['speedup'].get('macs', 1.0),
            )
            for model in result['models']
        },
    )


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


def last_accuracy(run_dir: Path) -> float:
    """Top-1 of the last validation of the classifier training run in
    ``run_dir``: its last checkpoint on the test split (the demo's val and
    test sets are one)."""
    return val_records(run_dir)[-1]['accuracy/top1']


def cpu_seconds() -> float:
    """CPU time (user + system) of this process (its in-process jobs) and
    its finished subprocesses: a stage's difference is what its jobs cost,
    whatever else the machine runs (an idle 2-core machine runs two jobs
    side by side)."""
    return sum(
        usage.ru_utime + usage.ru_stime
        for usage in (
            resource.getrusage(resource.RUSAGE_SELF),
            resource.getrusage(resource.RUSAGE_CHILDREN),
        )
    )


def machine_description() -> str:
    info = machine_info('cpu')
    return (
        f'{info["cpu"]}, {info["logical_cores"]} logical cores, '
        f'torch {info["torch"]}'
    )


def validation_size(data_root: Path) -> int:
    with open(
        data_root / CLS_DATA / 'meta' / 'val.txt', encoding='utf-8'
    ) as f:
        return sum(1 for line in f if line.strip())
