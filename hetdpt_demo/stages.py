"""The demo's stages, in order (:class:`Demo`): each runs the project's
tools on the configs in ``configs/demo/`` and leaves their outputs in the
work dir, where the report reads them (:mod:`hetdpt_demo.results`)."""

import csv
import io
import json
import os
import platform
import resource
import shutil
import time
from pathlib import Path
from typing import Dict, List, Tuple

from mmengine.config import Config

from hetdpt_mm.errors import UsageError
from hetdpt_mm.fileio import atomic_write_text

from . import results
from .data import make_all
from .jobs import Jobs, StageError
from .settings import (
    CONFIGS,
    DEFAULT_DATA_ROOT,
    MAP_SCHEDULES,
    OUTPUTS,
    STATE_FILE,
    STATE_VERSION,
    DemoOptions,
    check_path,
    read_state,
)

STAGES = dict(
    data='make the datasets',
    dense='train the dense classifier',
    map='collect MAP points (attention, GELU, interleaved)',
    fit='fit MAP and split the budget',
    prune='prune and fine-tune each compared split, once per seed',
    transfer='merge the MAP split, test it, train DETR and UperNet on it',
    benchmark="time each split's merged backbone",
    fig8='Fig. 8: ToMe and GTP-ViT on the dense and the HetDPT classifier',
    report='write the report',
)
#: What each stage leaves in the work dir: a resumed run checks that the
#: finished ones' are there (data and report always run again).
STAGE_OUTPUTS = dict(
    dense='dense/last_checkpoint',
    map='map/map_points.csv',
    fit='map/map_allocation.json',
    prune='splits',
    transfer='merged/test/test_metrics.json',
    benchmark='benchmark/splits.json',
    fig8='fig8/bench-none.json',
)
GLIBC = platform.libc_ver()[0] == 'glibc'  # --keep-freed-memory works
#: The first stage that reads each setting: resumed with another value,
#: the demo runs that stage and the later ones again.
SETTING_STAGES = dict(budget='fit', seeds='prune', all_splits='prune')


def cpu_seconds() -> float:
    """User + system time of the demo and its finished jobs."""
    return sum(
        usage.ru_utime + usage.ru_stime
        for usage in map(
            resource.getrusage,
            (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN),
        )
    )


def split_counts(budget: int, best, all_splits: bool) -> List[Tuple]:
    """The compared (attention, GELU) counts: MAP's pick, each type alone
    (or every split of the budget) and no removal, in that order."""
    splits = (
        [(a, budget - a) for a in range(budget + 1)]
        if all_splits
        else [(budget, 0), (0, budget)]
    )
    return list(dict.fromkeys([best] + splits + [(0, 0)]))


class Demo:
    """One demo run: ``stage_<name>`` for each of ``STAGES``, and the state
    that lets ``--resume`` skip the finished ones."""

    def __init__(self, options: DemoOptions):
        self.options, self.settings = options, options.settings
        self.repo, self.work = options.repo, options.work_dir
        cfg = Config.fromfile(options.repo / CONFIGS['dense'])
        self.depth = cfg.model.backbone.arch['num_layers']
        s = self.settings
        for option, path in (
            ('--work-dir', self.work),
            ('--data-root', options.data_root),
        ):
            check_path(path, option)
        if not 1 <= s.budget < self.depth:
            raise UsageError(
                f'--budget {s.budget}: give 1 to {self.depth - 1} (each '
                f'single-type split must keep a layer of the {self.depth})'
            )
        self.finished: List[str] = []
        self.seconds: Dict[str, List[float]] = {}
        self.commands: List[str] = []  # of the earlier run's kept stages
        self.jobs = None

    # ----------------------------------------------------------- helpers
    def rel(self, path) -> str:
        """A path as the jobs (run from the repository root) take it."""
        path = Path(path).resolve()
        try:
            return str(path.relative_to(self.repo))
        except ValueError:
            return str(path)

    def log(self, message: str) -> None:
        line = f'{time.strftime("%H:%M:%S")} {message}'
        print(line, flush=True)
        with open(self.work / 'demo.log', 'a', encoding='utf-8') as file:
            file.write(line + '\n')

    def options_for(self, config: str, *options: str) -> List[str]:
        """``--cfg-options`` of a job on ``config`` (or ``test``, the
        classifier's): ``options``, the data root when not the configs'
        own, and --quick's shortening."""
        root = self.rel(self.options.data_root)
        data = []
        if root != DEFAULT_DATA_ROOT:
            sub = dict(detr='coco/', upernet='ade').get(config, 'shapes')
            data = [
                f'{loader}_dataloader.dataset.data_root={root}/{sub}'
                for loader in ('train', 'val', 'test')
            ]
            if config == 'detr':
                ann = f'{root}/coco/annotations/instances_val2017.json'
                data += [f'val_evaluator.ann_file={ann}']
                data += [f'test_evaluator.ann_file={ann}']
        given = [*options, *data, *self.settings.options.get(config, ())]
        return ['--cfg-options', *given] if given else []

    def train(self, name, config, work, *options, first=False) -> Tuple:
        """A ``tools/train.py`` job; ``first``: validate before training."""
        argv = ['tools/train.py', CONFIGS[config], '--work-dir']
        argv += [self.rel(work), '--overwrite']
        argv += ['--validate-first'] if first else []
        return name, argv + self.options_for(config, *options)

    def test(self, name, checkpoint, work, *options) -> Tuple:
        """A ``tools/test.py`` job of a classifier checkpoint."""
        argv = ['tools/test.py', CONFIGS['dense'], self.rel(checkpoint)]
        argv += ['--work-dir', self.rel(work), '--out-metrics']
        argv += [self.rel(Path(work) / 'test_metrics.json')]
        return name, argv + self.options_for('test', *options)

    def benchmark(self, name, models, out: Path, *options) -> Tuple:
        """A ``tools/benchmark.py`` job of classifier backbones side by
        side; one thread unless told, timed by CPU time then."""
        s, threads = self.settings, str(self.options.threads or 1)
        argv = ['tools/benchmark.py', 'backbone', '--prefix', 'backbone.']
        for model, path in models.items():
            argv += ['--checkpoint', f'{model}={self.rel(path)}']
        argv += ['--img-size', '32', '--batch-size', str(s.bench_batch)]
        argv += ['--repeats', str(s.bench_repeats), '--threads', threads]
        argv += ['--clock', 'process'] if threads == '1' else []
        # Freed pages kept: token reduction's changing shapes refault them.
        argv += ['--keep-freed-memory'] if GLIBC else []
        argv += ['--force', '--json', self.rel(out.with_suffix('.json'))]
        return name, argv + [
            '--md',
            self.rel(out.with_suffix('.md')),
            *options,
        ]

    def dense(self) -> Path:
        return results.last_checkpoint(self.work / 'dense')

    # ------------------------------------------------------------ stages
    def stage_data(self) -> None:
        make_all(self.options.data_root)

    def stage_dense(self) -> None:
        self.jobs.run([self.train('dense', 'dense', self.work / 'dense')])

    def stage_map(self) -> None:
        s, out = self.settings, self.work / 'map'
        options = (
            f'load_from={self.rel(self.dense())}',
            f'custom_hooks.0.interval={s.map_interval}',
            f'custom_hooks.0.max_removed={s.map_steps}',
            f'train_cfg.max_epochs={s.map_steps * s.map_interval}',
        )
        self.jobs.run(
            [
                self.train(
                    f'map-{name}',
                    'map',
                    out / name,
                    *options,
                    f'custom_hooks.0.schedule={name}',
                )
                for name in MAP_SCHEDULES
            ]
        )
        # One points file: the starting (dense) point once, then every step.
        rows = []
        for name in MAP_SCHEDULES:
            path = out / name / 'map_points.csv'
            with open(path, encoding='utf-8') as file:
                reader = csv.DictReader(file)
                rows += [r for r in reader if not (rows and r['step'] == '0')]
        text = io.StringIO()
        writer = csv.DictWriter(text, reader.fieldnames, lineterminator='\n')
        writer.writeheader()
        writer.writerows(rows)
        atomic_write_text(out / 'map_points.csv', text.getvalue())

    def stage_fit(self) -> None:
        out, s = self.work / 'map', self.settings
        argv = ['tools/fit_map.py', self.rel(out / 'map_points.csv')]
        argv += ['--depth', str(self.depth), '--budget', str(s.budget)]
        argv += ['--bounds', 'full', '--plot', self.rel(out / 'map_fit.png')]
        argv += ['--save-fit', self.rel(out / 'map_fit.json'), '--force']
        argv += ['--save-allocation', self.rel(out / 'map_allocation.json')]
        self.jobs.run([('fit-map', argv)])

    def split_runs(self) -> Dict[str, Tuple[Tuple[int, int], int]]:
        """Every prune run by name: its (attention, GELU) counts and seed;
        the first is the main one (MAP's split, the first seed)."""
        s, best = self.settings, results.map_pick(self.work)
        return {
            f'{results.label(counts)}_seed{seed}': (counts, seed)
            for seed in s.seeds
            for counts in split_counts(s.budget, best, self.options.all_splits)
        }

    def stage_prune(self) -> None:
        epochs = self.settings.budget + self.settings.finetune_epochs
        options = (
            f'load_from={self.rel(self.dense())}',
            f'train_cfg.max_epochs={epochs}',  # one removal per epoch
            f'train_cfg.val_interval={epochs}',
        )
        self.jobs.run(
            [
                self.train(
                    name,
                    'prune',
                    self.work / 'splits' / name,
                    *options,
                    f'randomness.seed={seed}',
                    f'custom_hooks.0.counts.attn={attn}',
                    f'custom_hooks.0.counts.act={act}',
                )
                for name, ((attn, act), seed) in self.split_runs().items()
            ]
        )

    def stage_transfer(self) -> None:
        main = self.work / 'splits' / next(iter(self.split_runs()))
        merged = self.work / 'merged' / 'merged.pth'
        argv = ['tools/merge_ckpt.py', self.rel(results.last_checkpoint(main))]
        self.jobs.run([('merge', argv + [self.rel(merged), '--force'])])
        backbone = f'model.backbone.init_cfg.checkpoint={self.rel(merged)}'
        self.jobs.run(
            [
                self.test(
                    'merged-test', merged, self.work / 'merged' / 'test'
                ),
                *(
                    self.train(
                        kind, kind, self.work / kind, backbone, first=True
                    )
                    for kind in ('detr', 'upernet')
                ),
            ]
        )

    def stage_benchmark(self) -> None:
        models = dict(dense=self.dense())
        for name, (counts, seed) in self.split_runs().items():
            if seed == self.settings.seeds[0] and any(counts):
                run = self.work / 'splits' / name
                models[results.label(counts)] = results.merged_file(run)
        out = self.work / 'benchmark' / 'splits'
        self.jobs.run([self.benchmark('benchmark', models, out)])

    def fig8_options(self, method: str, value: int) -> Tuple[List, List]:
        """A Fig. 8 setting's ``--cfg-options`` of ``tools/test.py`` and
        options of ``tools/benchmark.py``."""
        if method == 'tome':
            test = [f'model.backbone.token_merge.r={value}']
            return test, ['--token-merge', str(value)]
        graph = self.settings.gtp_graph
        key = 'model.backbone.graph_propagation'
        test = [f'{key}.num_prop={value}', f'{key}.graph={graph}']
        bench = ['--graph-propagation', str(value)]
        return test, bench + ['--propagation-graph', graph]

    def stage_fig8(self) -> None:
        """Every token-reduction setting of both classifiers: its accuracy
        (``tools/test.py``, side by side), then its speed (one
        ``tools/benchmark.py`` per setting, both models, alone)."""
        s, out = self.settings, self.work / 'fig8'
        models = dict(hetdpt=self.work / 'merged' / 'merged.pth')
        models = dict(dense=self.dense(), **models)
        self.jobs.run(
            [
                self.test(
                    f'fig8-{model}-{method}{value}',
                    path,
                    out / f'{model}-{method}{value}',
                    *self.fig8_options(method, value)[0],
                )
                for method, value in s.fig8_points
                for model, path in models.items()
            ]
        )
        lane = [self.benchmark('fig8-bench-none', models, out / 'bench-none')]
        lane += [
            self.benchmark(
                f'fig8-bench-{method}{value}',
                models,
                out / f'bench-{method}{value}',
                *self.fig8_options(method, value)[1],
            )
            for method, value in s.fig8_points
        ]
        self.jobs.run([lane])

    def stage_report(self) -> None:
        from .report import write_report  # it imports this module

        write_report(self)

    # --------------------------------------------------------------- run
    def prepare(self) -> None:
        """Resume the earlier run in the work dir, or replace its outputs;
        any refusal comes before anything is written or deleted."""
        state_path = self.work / STATE_FILE
        state = None
        if state_path.is_file() or self.options.resume:
            if not state_path.is_file():
                raise UsageError(
                    f'--resume: no earlier demo run in {self.work} (no '
                    f'{STATE_FILE})'
                )
            state = read_state(state_path, STAGES)
        elif self.work.exists() and (
            not self.work.is_dir() or any(self.work.iterdir())
        ):
            raise UsageError(
                f'--work-dir {self.work} is not an empty directory and holds '
                'no earlier demo run: choose another --work-dir'
            )
        if not self.options.resume:
            for name in OUTPUTS if state else ():
                path = self.work / name
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                elif path.exists() or path.is_symlink():
                    path.unlink()
            return
        new = self.options.state_settings()
        old = state['settings']
        if any(old.get(key) != new[key] for key in ('quick', 'data_root')):
            raise UsageError(
                f'--resume: the run in {self.work} used other settings '
                f'({old}); start it again without --resume'
            )
        # Keep the stages before the first one a changed setting reaches.
        changed = [k for k in SETTING_STAGES if old.get(k) != new[k]]
        stop = min(
            [list(STAGES).index(SETTING_STAGES[k]) for k in changed],
            default=len(STAGES),
        )
        kept = state['finished'][:stop]  # the first stages, in order
        self.finished = [name for name in kept if name in STAGE_OUTPUTS]
        missing = [
            STAGE_OUTPUTS[name]
            for name in self.finished
            if not (self.work / STAGE_OUTPUTS[name]).exists()
        ]
        if missing:
            raise UsageError(
                f'--resume: {state_path} marks stages finished whose outputs '
                f'are missing ({", ".join(missing)}): start again without '
                '--resume'
            )
        self.seconds = {k: state['seconds'][k] for k in self.finished}
        self.commands = state['commands'] if self.finished else []

    def run(self) -> None:
        self.prepare()
        (self.work / 'logs').mkdir(parents=True, exist_ok=True)
        o = self.options
        self.jobs = Jobs(
            self.repo, self.work / 'logs', o.threads, o.jobs, self.log
        )
        self.jobs.commands = list(self.commands)
        self.load_before = os.getloadavg()[0]
        self.log(f'HetDPT demo: {o.command} (load {self.load_before:.2f})')
        for number, (name, title) in enumerate(STAGES.items(), 1):
            banner = f'[{number}/{len(STAGES)}] {title}'
            if name in self.finished:
                self.log(f'==== {banner}: done in an earlier run, skipped')
                continue
            self.log(f'==== {banner}')
            start, cpu = time.monotonic(), cpu_seconds()
            try:
                getattr(self, f'stage_{name}')()
            except (OSError, ValueError, KeyError, TypeError) as err:
                if isinstance(err, StageError):
                    raise
                raise StageError(f'stage "{title}": {err}') from err
            self.seconds[name] = [
                time.monotonic() - start,
                cpu_seconds() - cpu,
            ]
            self.finished = [n for n in STAGES if n in {*self.finished, name}]
            state = dict(version=STATE_VERSION, settings=o.state_settings())
            state.update(finished=self.finished, seconds=self.seconds)
            state.update(commands=self.jobs.commands)
            atomic_write_text(self.work / STATE_FILE, json.dumps(state))
            self.log(f'==== {banner}: done in {self.seconds[name][0]:.1f} s')
        self.log(f'report: {self.work / "report.md"}')
