#!/usr/bin/env python
"""HetDPT end to end on the embedded CPU demo, in one command.

    python tools/demo.py [--quick] [--work-dir work_dirs/demo]
        [--data-root data/demo] [--budget K] [--jobs N] [--threads N]
        [--resume]

Stages (each runs the project's own tools as subprocesses, exactly the
commands a user would type; they are printed, logged under
``<work-dir>/logs/`` and listed in the report):

1. make the demo datasets (digits, toy COCO, toy ADE20K) if missing;
2. train the dense classifier (``configs/demo/vit-demo_digits.py``);
3. collect MAP points with ``MAPCollectHook`` from the dense checkpoint,
   schedules attn / act / interleaved
   (``configs/demo/vit-demo_digits_map.py``), and test the dense model;
4. fit MAP and split the budget (``tools/fit_map.py``, plot);
5. prune with ``HetDPTPruneHook`` (MAP counts) and fine-tune
   (``configs/demo/vit-demo_digits_hetdpt.py``);
6. merge (``tools/merge_ckpt.py``) and test the pruned model;
7. DETR and UperNet from the merged backbone: test before training, train,
   test after (``configs/demo/{detr,upernet}_hetdpt_demo.py``); test the
   merged classifier;
8. benchmark dense vs pruned vs merged (``tools/benchmark.py``);
9. write ``report.md``, ``summary.json`` and the plots.

The independent jobs of a stage run side by side (``--jobs``, default one
per core, at most 2).  Threads per job (``--threads``) default to the idle
cores, measured when the stage starts, shared out among its jobs: tiny
models on a busy machine are much slower with OpenMP threads that wait for
each other.  A new run replaces the outputs of an earlier demo run in the
work dir; ``--resume`` continues one instead, skipping its finished stages.
``--quick`` is the CI variant: the same stages on tiny subsets and
schedules (minutes; its accuracies mean nothing).  See docs/demo.md.
"""
import argparse
import csv
import dataclasses
import io
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a clone without installing

import torch  # noqa: E402
from mmengine.logging import MMLogger  # noqa: E402

from hetdpt_mm import demo_report  # noqa: E402
from hetdpt_mm.benchmark import machine_info  # noqa: E402
from hetdpt_mm.checkpoint import load_checkpoint_file  # noqa: E402
from hetdpt_mm.datasets import make_all  # noqa: E402
from hetdpt_mm.fileio import atomic_write_text  # noqa: E402
from hetdpt_mm.hooks.map_collect_hook import POINT_COLUMNS  # noqa: E402
from hetdpt_mm.hooks.prune_hook import STATE_KEY as PRUNE_STATE  # noqa: E402
from hetdpt_mm.pruning import (AnalyticCost, MAPFit, allocate,  # noqa: E402
                               load_points)
from hetdpt_mm.spec import read_spec_meta  # noqa: E402

DENSE_CONFIG = 'configs/demo/vit-demo_digits.py'
MAP_CONFIG = 'configs/demo/vit-demo_digits_map.py'
PRUNE_CONFIG = 'configs/demo/vit-demo_digits_hetdpt.py'
DETR_CONFIG = 'configs/demo/detr_hetdpt_demo.py'
UPERNET_CONFIG = 'configs/demo/upernet_hetdpt_demo.py'
DEFAULT_DATA_ROOT = 'data/demo'
STATE_FILE = 'demo_state.json'
STATE_VERSION = 1
#: What a demo run creates in its work dir (all of it is replaced by a new
#: run; nothing else there is touched).
OUTPUTS = ('vit-demo_digits', 'map', 'vit-demo_digits_hetdpt',
           'detr_hetdpt_demo', 'upernet_hetdpt_demo', 'benchmark', 'logs',
           'report.md', 'summary.json', 'accuracy_vs_speedup.png',
           'losses.png', 'demo.log', STATE_FILE)
MAP_SCHEDULES = ('attn', 'act', 'interleaved')


class DemoError(Exception):
    """A stage failed or the inputs are unusable; the message says which."""


@dataclasses.dataclass(frozen=True)
class Settings:
    """Sizes of one demo variant.  ``None`` keeps the config's value."""
    dense_epochs: Optional[int]
    dense_train_images: Optional[int]  # the first N images only
    map_steps: Dict[str, int]  # removal steps per schedule
    map_interval: int  # fine-tuning epochs per step
    map_subset: Union[int, float]  # fast fine-tune: images or fraction
    map_calib_images: int  # TE score
    budget: int  # layers to remove, split by MAP
    prune_epochs: Optional[int]
    prune_train_images: Optional[int]
    detr_epochs: Optional[int]
    detr_train_images: Optional[int]
    upernet_iters: Optional[int]
    transfer_log_interval: Optional[int]  # iterations per logged loss
    bench_batch: int
    bench_repeats: int
    context_bench: bool  # also time DeiT-S at 224 (context)


FULL = Settings(
    dense_epochs=None, dense_train_images=None,
    map_steps=dict(attn=2, act=4, interleaved=2), map_interval=1,
    map_subset=0.5, map_calib_images=128, budget=4,
    prune_epochs=None, prune_train_images=None,
    detr_epochs=None, detr_train_images=None, upernet_iters=None,
    transfer_log_interval=None, bench_batch=64, bench_repeats=15,
    context_bench=True)
QUICK = Settings(
    dense_epochs=2, dense_train_images=256,
    map_steps=dict(attn=2, act=2, interleaved=2), map_interval=1,
    map_subset=64, map_calib_images=64, budget=2,
    prune_epochs=3, prune_train_images=128,
    detr_epochs=1, detr_train_images=16, upernet_iters=4,
    transfer_log_interval=1, bench_batch=16, bench_repeats=2,
    context_bench=False)

#: Log lines of the subprocesses shown on the console (all are in the logs).
PROGRESS_LINE = re.compile(
    r'Epoch\((?:val|test)\)|Iter\((?:val|test)\)|MAPCollectHook (?:point|'
    r'step \d+: removed)|HetDPT prune \d|HetDPT prune counts|spec now|'
    r'merged checkpoint written|Traceback|Error|error:')
TRAIN_LINE = re.compile(r'((?:Epoch|Iter)\(train\)\s*(?:\[\d+\])?\s*'
                        r'\[\s*\d+/\d+\])')
MMENGINE_PREFIX = re.compile(r'^(?:\d{4}/)?\d\d/\d\d \d\d:\d\d:\d\d - \S+ - '
                             r'\w+ - ')
NOISY_FIELDS = re.compile(r'\s+(?:data_time|time|base_lr|lr|grad_norm|eta): '
                          r'\S+')
TRAIN_LINE_SECONDS = 20  # at most one training line per job this often


# --------------------------------------------------------------------- jobs
@dataclasses.dataclass
class Job:
    """One subprocess: ``python ARGV...`` from the repository root."""
    name: str
    #: the arguments, or a function giving them when the job starts (its
    #: input is made by an earlier job of the same lane)
    argv: Union[List[str], Callable[[], List[str]]]
    show_all: bool = False  # print every line (short tools) or progress only
    last_train_line: float = -float('inf')  # when a training line was shown


class JobRunner:
    """Runs jobs as subprocesses with a live, filtered view of their output;
    the full output of each goes to ``<log_dir>/<name>.log``."""

    def __init__(self, logger, log_dir: Path, threads: Optional[int],
                 jobs: int):
        self.logger = logger
        self.log_dir = log_dir
        self.threads = threads  # None: chosen per stage (lane_threads)
        self.jobs = jobs
        self.commands: List[str] = []
        self.durations: Dict[str, float] = {}
        self.threads_used: Dict[str, int] = {}
        self._lock = threading.Lock()
        self._running: set = set()
        self._failure: Optional[Exception] = None

    def run_lanes(self, lanes: Sequence[Sequence[Job]]) -> None:
        """Run each lane's jobs in order, up to ``jobs`` lanes at a time.
        The first failure stops the other lanes (their running jobs are
        terminated) and is raised; so is an interruption of the demo."""
        lanes = [lane for lane in lanes if lane]
        workers = min(self.jobs, len(lanes))
        threads = self.threads or lane_threads(workers)
        self._failure = None
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(self._run_lane, lane, threads)
                       for lane in lanes]
            try:
                for future in futures:
                    future.result()
            except BaseException:  # Ctrl-C or SIGTERM of the demo itself
                self._stop_all()
                raise
        if self._failure is not None:
            raise self._failure

    def _run_lane(self, lane: Sequence[Job], threads: int) -> None:
        for job in lane:
            if self._failure is not None:
                return
            try:
                self._run(job, threads)
            except Exception as err:  # raised by run_lanes
                with self._lock:
                    if self._failure is None:
                        self._failure = err
                self._stop_all()
                return

    def _stop_all(self) -> None:
        with self._lock:
            for process in self._running:
                process.terminate()

    def _run(self, job: Job, threads: int) -> None:
        argv = job.argv() if callable(job.argv) else job.argv
        command = shlex.join([f'OMP_NUM_THREADS={threads}', 'python'] + argv)
        with self._lock:
            self.commands.append(command)
            self.threads_used[job.name] = threads
        log_path = self.log_dir / f'{job.name}.log'
        self.logger.info(f'[{job.name}] $ {command}')
        start = time.monotonic()
        with open(log_path, 'w', encoding='utf-8') as log, subprocess.Popen(
                [sys.executable] + argv, cwd=REPO, env=dict(
                    os.environ, PYTHONUNBUFFERED='1',
                    OMP_NUM_THREADS=str(threads),
                    MKL_NUM_THREADS=str(threads)),
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                bufsize=1) as process:
            with self._lock:
                self._running.add(process)
            try:
                for line in process.stdout:
                    log.write(line)
                    self._show(job, MMENGINE_PREFIX.sub('', line.rstrip()))
            finally:
                with self._lock:
                    self._running.discard(process)
        seconds = time.monotonic() - start
        with self._lock:
            self.durations[job.name] = seconds
        if process.returncode != 0:
            tail = log_path.read_text(encoding='utf-8').splitlines()[-25:]
            raise DemoError(
                f'job {job.name} failed with exit status '
                f'{process.returncode} after {seconds:.0f} s:\n  $ {command}'
                '\n  last lines of its output:\n    ' + '\n    '.join(tail) +
                f'\n  full log: {log_path}')
        self.logger.info(f'[{job.name}] done in {seconds:.1f} s')

    def _show(self, job: Job, text: str) -> None:
        """Print a job's output line if it tells the user something: all of
        it for short tools, else results and decisions, and a training line
        now and then."""
        if job.show_all:
            self.logger.info(f'[{job.name}] {text}')
        elif PROGRESS_LINE.search(text):
            self.logger.info(f'[{job.name}] {NOISY_FIELDS.sub("", text)}')
        elif TRAIN_LINE.search(text) and (time.monotonic() -
                                          job.last_train_line >=
                                          TRAIN_LINE_SECONDS):
            job.last_train_line = time.monotonic()
            eta = re.search(r'eta: (\S+)', text)
            self.logger.info(f'[{job.name}] {NOISY_FIELDS.sub("", text)}' +
                             (f'  eta {eta.group(1)}' if eta else ''))


# -------------------------------------------------------------------- demo
def classifier_schedule_options(epochs: Optional[int],
                                train_images: Optional[int]) -> List[str]:
    """``--cfg-options`` that shorten a classifier run (``None``: keep the
    config's value); validation runs once, at the end."""
    options = []
    if epochs is not None:
        options += [f'train_cfg.max_epochs={epochs}',
                    f'train_cfg.val_interval={epochs}']
    if train_images is not None:
        options.append(f'train_dataloader.dataset.indices={train_images}')
    return options


def last_checkpoint(work_dir: Path) -> Path:
    """The checkpoint MMEngine saved last in ``work_dir``."""
    marker = work_dir / 'last_checkpoint'
    if not marker.is_file():
        raise DemoError(f'no checkpoint was saved in {work_dir} '
                        f'({marker} is missing)')
    return Path(marker.read_text().strip())


def load_average() -> float:
    return os.getloadavg()[0] if hasattr(os, 'getloadavg') else float('nan')


def _cpu_times() -> tuple:
    """(idle, total) jiffies of all cores since boot (Linux)."""
    with open('/proc/stat', encoding='ascii') as file:
        values = [int(v) for v in file.readline().split()[1:9]]
    return values[3] + values[4], sum(values)


def free_cores(seconds: float = 0.5) -> float:
    """Idle CPU capacity now, in cores: sampled from /proc/stat, else
    estimated from the load average."""
    cores = os.cpu_count() or 1
    try:
        idle_before, total_before = _cpu_times()
        time.sleep(seconds)
        idle_after, total_after = _cpu_times()
    except (OSError, ValueError, IndexError):
        load = load_average()
        return float(cores) if load != load else max(0.0, cores - load)
    total = total_after - total_before
    return cores * (idle_after - idle_before) / total if total else cores


def lane_threads(lanes: int) -> int:
    """Threads per job when ``lanes`` jobs run side by side: the free cores
    shared out, at least 1.  Tiny models gain from a second thread only if
    a core is really free: on a busy machine OpenMP threads mostly wait for
    each other (measured here: 1.6x faster on an idle 2-core machine, 3.5x
    slower under load 7)."""
    cores = os.cpu_count() or 1
    return max(1, min(cores // lanes, int(free_cores() / lanes + 0.25)))


class Demo:
    """The stages of the demo; results accumulate in ``self.results`` and
    are saved with the finished stages in ``<work_dir>/demo_state.json``."""

    STAGES = (
        ('data', 'make the demo datasets'),
        ('dense', 'train the dense classifier'),
        ('map', 'collect MAP points (attn / act / interleaved); test the '
         'dense model'),
        ('fit', 'fit MAP and split the budget'),
        ('prune', 'prune with HetDPTPruneHook and fine-tune'),
        ('merge', 'merge (tools/merge_ckpt.py); test the pruned model'),
        ('transfer', 'DETR and UperNet from the merged backbone; test the '
         'merged classifier'),
        ('benchmark', 'benchmark dense vs pruned vs merged'),
        ('report', 'write the report'),
    )

    def __init__(self, args: argparse.Namespace, settings: Settings):
        self.args = args
        self.settings = settings
        self.work_dir: Path = args.work_dir
        self.data_root: Path = args.data_root
        self.state: Dict[str, Any] = dict(
            version=STATE_VERSION, mode=args.mode,
            settings=dataclasses.asdict(settings),
            data_root=str(args.data_root), finished=[], seconds={},
            results={}, commands=[], job_seconds={}, job_threads={})
        self.results = self.state['results']
        self.logger: Optional[MMLogger] = None
        self.jobs: Optional[JobRunner] = None

    # ----------------------------------------------------------- helpers
    def rel(self, path: Union[str, Path]) -> str:
        """A path as the subprocesses (run from the repository root) and
        the report should show it."""
        path = Path(path)
        try:
            return str(path.resolve().relative_to(REPO))
        except ValueError:
            return str(path.resolve())

    def out(self, *parts: str) -> Path:
        return self.work_dir.joinpath(*parts)

    def data_options(self, kind: str) -> List[str]:
        """``--cfg-options`` pointing a demo config at ``--data-root``
        (nothing when it is the configs' own ``data/demo``)."""
        root = self.rel(self.data_root)
        if root == DEFAULT_DATA_ROOT:
            return []
        loaders = ('train_dataloader', 'val_dataloader', 'test_dataloader')
        sub = dict(cls='cls', detr='coco', upernet='ade')[kind]
        options = [f'{loader}.dataset.data_root={root}/{sub}'
                   for loader in loaders]
        if kind == 'detr':
            # The COCO evaluator reads the annotation file itself.
            ann_file = f'{root}/coco/annotations/instances_val2017.json'
            options += [f'val_evaluator.ann_file={ann_file}',
                        f'test_evaluator.ann_file={ann_file}']
        return options

    @staticmethod
    def train_argv(config: str, work_dir: str, options: Sequence[str],
                   validate: bool = True) -> List[str]:
        argv = ['tools/train.py', config, '--work-dir', work_dir]
        if not validate:
            argv.append('--no-validate')
        return argv + (['--cfg-options', *options] if options else [])

    @staticmethod
    def test_argv(config: str, checkpoint: str, work_dir: str,
                  metrics: str, options: Sequence[str]) -> List[str]:
        argv = ['tools/test.py', config, checkpoint, '--work-dir', work_dir,
                '--out-metrics', metrics]
        return argv + (['--cfg-options', *options] if options else [])

    def save_state(self) -> None:
        self.state['commands'] = self.jobs.commands
        self.state['job_seconds'] = self.jobs.durations
        self.state['job_threads'] = self.jobs.threads_used
        atomic_write_text(self.out(STATE_FILE),
                          json.dumps(self.state, indent=1) + '\n')

    # --------------------------------------------------------------- run
    def prepare_work_dir(self) -> None:
        """Resume an earlier run, or replace its outputs; never touch a
        directory the demo did not make."""
        state_path = self.out(STATE_FILE)
        if self.args.resume:
            if not state_path.is_file():
                raise DemoError(f'--resume: {state_path} does not exist (no '
                                'earlier demo run in this work dir)')
            state = json.loads(state_path.read_text())
            if any(state.get(key) != self.state[key]
                   for key in ('version', 'settings', 'data_root')):
                raise DemoError(
                    f'--resume: the run in {self.work_dir} used other '
                    f'settings (mode {state.get("mode")!r}, data root '
                    f'{state.get("data_root")}); start it again without '
                    '--resume')
            self.state.update(state)
            self.results = self.state['results']
            return
        if self.work_dir.exists():
            if not self.work_dir.is_dir():
                raise DemoError(f'--work-dir {self.work_dir} is not a '
                                'directory')
            if any(self.work_dir.iterdir()) and not state_path.is_file():
                raise DemoError(
                    f'--work-dir {self.work_dir} is not empty and holds no '
                    'earlier demo run: choose another --work-dir')
            for name in OUTPUTS:
                path = self.out(name)
                if path.is_dir():
                    shutil.rmtree(path)
                elif path.exists():
                    path.unlink()

    def run(self) -> None:
        self.prepare_work_dir()
        self.out('logs').mkdir(parents=True, exist_ok=True)
        self.logger = MMLogger.get_instance(
            f'hetdpt_demo_{time.time_ns()}', logger_name='hetdpt_demo',
            log_file=str(self.out('demo.log')),
            file_mode='a' if self.args.resume else 'w')
        self.jobs = JobRunner(self.logger, self.out('logs'),
                              self.args.threads, self.args.jobs)
        self.jobs.commands = list(self.state['commands'])
        self.jobs.durations = dict(self.state['job_seconds'])
        self.jobs.threads_used = dict(self.state['job_threads'])
        self.state.setdefault('load_before', load_average())
        start = time.monotonic() - sum(self.state['seconds'].values())
        self.logger.info(
            f'HetDPT demo ({self.args.mode}): work dir '
            f'{self.rel(self.work_dir)}, data {self.rel(self.data_root)}, '
            f'up to {self.args.jobs} parallel job(s), '
            f'{self.args.threads or "auto"} thread(s) each, load average '
            f'{load_average():.2f}')
        for number, (name, title) in enumerate(self.STAGES, 1):
            banner = (f'[{number}/{len(self.STAGES)}] {title} (elapsed '
                      f'{demo_report.duration(time.monotonic() - start)})')
            if name in self.state['finished']:
                self.logger.info(f'==== {banner}: done in an earlier run, '
                                 'skipped')
                continue
            self.logger.info(f'==== {banner}')
            stage_start = time.monotonic()
            try:
                getattr(self, f'stage_{name}')()
            except (OSError, ValueError) as err:
                raise DemoError(f'stage "{title}": {err}') from err
            seconds = time.monotonic() - stage_start
            self.state['seconds'][name] = seconds
            self.state['finished'].append(name)
            self.save_state()
            self.logger.info(f'==== [{number}/{len(self.STAGES)}] done in '
                             f'{seconds:.1f} s')
        self.logger.info(
            f'HetDPT demo finished in '
            f'{demo_report.duration(time.monotonic() - start)}: report '
            f'{self.rel(self.out("report.md"))}\n' +
            self.results['headline'])

    # ------------------------------------------------------------ stages
    def stage_data(self) -> None:
        paths = make_all(self.data_root)
        self.logger.info('demo datasets: ' + ', '.join(
            f'{name} {self.rel(path)}' for name, path in paths.items()))

    def stage_dense(self) -> None:
        s = self.settings
        work = self.rel(self.out('vit-demo_digits'))
        options = self.data_options('cls') + classifier_schedule_options(
            s.dense_epochs, s.dense_train_images)
        self.jobs.run_lanes([[Job('dense-train', self.train_argv(
            DENSE_CONFIG, work, options))]])
        checkpoint = last_checkpoint(self.out('vit-demo_digits'))
        record = read_spec_meta(load_checkpoint_file(checkpoint, mmap=True))
        self.results['dense'] = dict(
            checkpoint=self.rel(checkpoint), arch=record['arch'],
            depth=record['spec'].depth)

    def stage_map(self) -> None:
        s = self.settings
        dense = self.results['dense']
        jobs = {}
        for schedule in MAP_SCHEDULES:
            steps = s.map_steps[schedule]
            options = [
                f'load_from={dense["checkpoint"]}',
                f'custom_hooks.0.schedule={schedule}',
                f'custom_hooks.0.interval={s.map_interval}',
                f'custom_hooks.0.max_removed={steps}',
                f'custom_hooks.0.calib_images={s.map_calib_images}',
                f'train_cfg.max_epochs={steps * s.map_interval}',
                f'train_dataloader.sampler.subset={s.map_subset}',
            ] + self.data_options('cls')
            jobs[schedule] = Job(f'map-{schedule}', self.train_argv(
                MAP_CONFIG, self.rel(self.out('map', schedule)), options))
        dense_test = Job('dense-test', self.test_argv(
            DENSE_CONFIG, dense['checkpoint'],
            self.rel(self.out('vit-demo_digits')),
            self.rel(self.out('vit-demo_digits', 'test_metrics.json')),
            self.data_options('cls')))
        # On two cores: the longest schedule beside the other two, then the
        # dense test (it needs no MAP result) on whichever core frees first.
        longest = max(MAP_SCHEDULES, key=lambda name: s.map_steps[name])
        self.jobs.run_lanes([
            [jobs[longest]],
            [jobs[name] for name in MAP_SCHEDULES if name != longest],
            [dense_test]])
        dense['accuracy'] = demo_report.read_json(self.out(
            'vit-demo_digits', 'test_metrics.json'))['accuracy/top1']
        # One points file: the starting (dense) point once, then every
        # removal step of every schedule.
        rows = []
        for schedule in MAP_SCHEDULES:
            with open(self.out('map', schedule, 'map_points.csv'),
                      encoding='utf-8') as file:
                rows += [row for row in csv.DictReader(file)
                         if not (rows and row['step'] == '0')]
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=POINT_COLUMNS,
                                lineterminator='\n')
        writer.writeheader()
        writer.writerows(rows)
        atomic_write_text(self.out('map', 'map_points.csv'), text.getvalue())
        load_points(self.out('map', 'map_points.csv'), depth=dense['depth'])
        self.results['map'] = dict(points=rows,
                                   interval=s.map_interval)
        self.logger.info(f'{len(rows)} MAP points in '
                         f'{self.rel(self.out("map", "map_points.csv"))}')

    def stage_fit(self) -> None:
        depth = self.results['dense']['depth']
        fit_path = self.out('map', 'map_fit.json')
        self.jobs.run_lanes([[Job('fit-map', [
            'tools/fit_map.py', self.rel(self.out('map', 'map_points.csv')),
            '--depth', str(depth), '--budget', str(self.settings.budget),
            '--bounds', 'full', '--plot',
            self.rel(self.out('map', 'map_fit.png')), '--save-fit',
            self.rel(fit_path), '--force'], show_all=True)]])
        fit = MAPFit.from_dict(demo_report.read_json(fit_path))
        allocation = allocate(fit, self.settings.budget, depth, 'full')
        self.results['map'].update(
            fit=fit.to_dict(), bounds='full', fit_path=self.rel(fit_path),
            degree=fit.degree, cv_mae=fit.cv_mae, cv_rmse=fit.cv_rmse,
            n_attn=allocation.n_attn, n_act=allocation.n_act,
            predicted=allocation.best.predicted_accuracy)

    def stage_prune(self) -> None:
        s = self.settings
        work = self.out('vit-demo_digits_hetdpt')
        options = [f'load_from={self.results["dense"]["checkpoint"]}',
                   f'custom_hooks.0.map_fit={self.results["map"]["fit_path"]}',
                   f'custom_hooks.0.budget={self.settings.budget}']
        options += classifier_schedule_options(s.prune_epochs,
                                               s.prune_train_images)
        options += self.data_options('cls')
        self.jobs.run_lanes([[Job('prune-train', self.train_argv(
            PRUNE_CONFIG, self.rel(work), options))]])
        checkpoint = last_checkpoint(work)
        loaded = load_checkpoint_file(checkpoint, mmap=True)
        spec = read_spec_meta(loaded)['spec']
        self.results['prune'] = dict(
            checkpoint=self.rel(checkpoint),
            hook_merged=self.rel(work / 'vit-demo_digits_hetdpt_merged.pth'),
            spec=dict(spec.to_dict(), n_attn=spec.n_attn, n_act=spec.n_act),
            decisions=loaded['meta'][PRUNE_STATE]['decisions'])

    def stage_merge(self) -> None:
        prune = self.results['prune']
        work = self.out('vit-demo_digits_hetdpt')
        merged = self.rel(work / 'merged.pth')
        self.jobs.run_lanes([
            [Job('merge', ['tools/merge_ckpt.py', prune['checkpoint'], merged,
                           '--force'], show_all=True)],
            [Job('pruned-test', self.test_argv(
                PRUNE_CONFIG, prune['checkpoint'], self.rel(work),
                self.rel(work / 'test_metrics_pruned.json'),
                self.data_options('cls')))]])
        prune.update(
            merged=merged,
            accuracy=demo_report.read_json(
                work / 'test_metrics_pruned.json')['accuracy/top1'],
            hook_output_identical=self.same_weights(
                REPO / merged, REPO / prune['hook_merged']))

    @staticmethod
    def same_weights(path_a: Path, path_b: Path) -> bool:
        """Whether two checkpoints hold bit-identical tensors."""
        a = load_checkpoint_file(path_a)['state_dict']
        b = load_checkpoint_file(path_b)['state_dict']
        return a.keys() == b.keys() and all(torch.equal(a[k], b[k])
                                            for k in a)

    def stage_transfer(self) -> None:
        s = self.settings
        merged = self.results['prune']['merged']
        overrides = dict(
            detr=[] if s.detr_epochs is None else [
                f'train_cfg.max_epochs={s.detr_epochs}',
                f'train_cfg.val_interval={s.detr_epochs}'],
            upernet=[] if s.upernet_iters is None else [
                f'train_cfg.max_iters={s.upernet_iters}',
                f'train_cfg.val_interval={s.upernet_iters}'])
        if s.detr_train_images is not None:
            overrides['detr'].append(
                f'train_dataloader.dataset.indices={s.detr_train_images}')
        if s.transfer_log_interval is not None:
            for options in overrides.values():
                options.append(f'default_hooks.logger.interval='
                               f'{s.transfer_log_interval}')
        lanes = []
        for kind, config in (('detr', DETR_CONFIG),
                             ('upernet', UPERNET_CONFIG)):
            work = self.out(Path(config).stem)
            common = [f'model.backbone.init_cfg.checkpoint={merged}'
                      ] + self.data_options(kind)

            def test_after(config=config, work=work, common=common):
                return self.test_argv(
                    config, self.rel(last_checkpoint(work)), self.rel(work),
                    self.rel(work / 'test_metrics_after_training.json'),
                    common)

            lanes.append([
                Job(f'{kind}-test-before', self.test_argv(
                    config, merged, self.rel(work),
                    self.rel(work / 'test_metrics_before_training.json'),
                    common)),
                Job(f'{kind}-train', self.train_argv(
                    config, self.rel(work), common + overrides[kind],
                    validate=False)),
                Job(f'{kind}-test-after', test_after),
            ])
        prune_work = self.out('vit-demo_digits_hetdpt')
        # The deployment path: the plain dense config and the merged file,
        # whose meta rebuilds the pruned structure.  It runs on whichever
        # core the shorter of DETR and UperNet frees first.
        lanes.append([Job('merged-test', self.test_argv(
            DENSE_CONFIG, merged, self.rel(prune_work),
            self.rel(prune_work / 'test_metrics_merged.json'),
            self.data_options('cls')))])
        self.jobs.run_lanes(lanes)
        self.results['prune']['merged_accuracy'] = demo_report.read_json(
            prune_work / 'test_metrics_merged.json')['accuracy/top1']
        for kind, config in (('detr', DETR_CONFIG),
                             ('upernet', UPERNET_CONFIG)):
            work = self.out(Path(config).stem)
            curve = demo_report.scalar_curve(demo_report.train_scalars(work))
            self.results[kind] = dict(
                before=demo_report.read_json(
                    work / 'test_metrics_before_training.json'),
                after=demo_report.read_json(
                    work / 'test_metrics_after_training.json'),
                loss_curve=curve, loss_first=curve[0][1],
                loss_last=curve[-1][1], iterations=curve[-1][0],
                checkpoint=self.rel(last_checkpoint(work)))

    def stage_benchmark(self) -> None:
        s = self.settings
        out = self.out('benchmark')
        # One thread unless told, timed by the process's CPU time: on a
        # shared machine that is what other jobs cannot inflate.
        threads = self.args.threads or 1
        common = ['--threads', str(threads), '--force'] + (
            ['--clock', 'process'] if threads == 1 else [])
        runs = dict(demo=[
            'tools/benchmark.py', 'backbone', '--checkpoint',
            self.results['prune']['checkpoint'], '--prefix', 'backbone.',
            '--img-size', '32', '--batch-size', str(s.bench_batch),
            '--repeats', str(s.bench_repeats)])
        if s.context_bench:
            # For context: DeiT-S at 224 with the authors' DeiT-B spec.
            runs['context'] = ['tools/benchmark.py', 'backbone', '--arch',
                               'deit-small', '--batch-size', '4',
                               '--repeats', '3']
        lane = [Job(f'benchmark-{name}', argv + common + [
            '--json', self.rel(out / f'{name}.json'), '--md',
            self.rel(out / f'{name}.md')], show_all=True)
            for name, argv in runs.items()]
        # Timings only mean something with nothing else of ours running.
        self.jobs.run_lanes([lane])
        self.results['benchmark'] = {
            name: condense_benchmark(
                demo_report.read_json(out / f'{name}.json'),
                (out / f'{name}.md').read_text(encoding='utf-8'))
            for name in runs}

    def stage_report(self) -> None:
        summary = self.summary()
        if not all(map(math.isfinite, demo_report.all_numbers(summary))):
            atomic_write_text(self.out('summary.json'),
                              json.dumps(summary, indent=1) + '\n')
            raise DemoError('the results hold non-finite numbers: see '
                            f'{self.rel(self.out("summary.json"))}')
        removal_steps = [(p, speedup) for p, speedup in zip(
            summary['map']['points'], summary['map']['point_speedups'])
            if p['step'] != '0']
        demo_report.write_png(
            self.out('accuracy_vs_speedup.png'),
            demo_report.plot_accuracy_vs_speedup(
                *zip(*removal_steps),
                [dict(name=name, accuracy=summary['classification'][name][
                    'accuracy'], speedup=summary['benchmark']['demo'][
                        'models'][name]['speedup'])
                 for name in ('dense', 'pruned', 'merged')]))
        demo_report.write_png(self.out('losses.png'), demo_report.plot_losses(
            {'DETR (toy COCO)': self.results['detr']['loss_curve'],
             'UperNet (toy ADE20K)': self.results['upernet']['loss_curve']}))
        atomic_write_text(self.out('summary.json'),
                          json.dumps(summary, indent=1) + '\n')
        atomic_write_text(self.out('report.md'),
                          demo_report.format_report(summary))
        self.results['headline'] = demo_report.headline(summary)

    # ----------------------------------------------------------- summary
    def analytic_cost(self) -> AnalyticCost:
        """MACs of the demo ViT (from the dense checkpoint's meta) at its
        input size, by removed counts."""
        build_args = self.results['dense']['arch']
        dims = build_args['arch']
        return AnalyticCost(
            embed_dim=dims['embed_dims'], num_heads=dims['num_heads'],
            mlp_ratio=dims.get('mlp_ratio', 4), depth=dims['num_layers'],
            img_size=build_args['img_size'],
            patch_size=build_args['patch_size'])

    def summary(self) -> Dict[str, Any]:
        r = self.results
        cost = self.analytic_cost()
        total = sum(self.state['seconds'].values())
        points = r['map']['points']
        return dict(
            mode=self.args.mode, command=self.args.command,
            machine=machine_description(), jobs=self.args.jobs,
            threads=self.args.threads or 'auto',
            job_threads=self.jobs.threads_used,
            load_before=self.state['load_before'],
            load_after=load_average(),
            finished_at=datetime.now().isoformat(timespec='seconds'),
            wall_seconds=total,
            stages=[dict(name=name, title=title,
                         seconds=self.state['seconds'].get(name, 0.0))
                    for name, title in self.STAGES if name != 'report'],
            job_seconds=self.jobs.durations,
            commands=self.jobs.commands,
            classification=dict(
                arch=r['dense']['arch'].get('arch'),
                depth=r['dense']['depth'], budget=self.settings.budget,
                val_images=validation_size(self.data_root),
                dense=dict(accuracy=r['dense']['accuracy'],
                           checkpoint=r['dense']['checkpoint']),
                pruned=dict(accuracy=r['prune']['accuracy'],
                            checkpoint=r['prune']['checkpoint']),
                merged=dict(accuracy=r['prune']['merged_accuracy'],
                            checkpoint=r['prune']['merged']),
                pruned_equals_merged=(r['prune']['accuracy'] ==
                                      r['prune']['merged_accuracy']),
                hook_output_identical=r['prune']['hook_output_identical'],
                spec=r['prune']['spec'], decisions=r['prune']['decisions']),
            map=dict(points=points, point_speedups=demo_report.map_speedups(
                points, cost), **{k: r['map'][k] for k in (
                    'fit', 'bounds', 'interval', 'degree', 'cv_mae',
                    'cv_rmse', 'n_attn', 'n_act', 'predicted')}),
            detr=r['detr'], upernet=r['upernet'],
            benchmark=r['benchmark'])


def condense_benchmark(result: Dict[str, Any], markdown: str
                       ) -> Dict[str, Any]:
    """What the report needs from one ``tools/benchmark.py`` JSON."""
    settings = result['settings']
    return dict(
        batch_size=settings['batch_size'], threads=settings['threads'],
        repeats=settings['repeats'], img_size=settings['img_size'],
        clock=settings['clock'],
        markdown=markdown, models={
            model['name']: dict(
                params=model['params'], macs=model['macs']['total'],
                median_ms=model['timing']['median_ms'],
                speedup=model['speedup']['median'],
                macs_speedup=model['speedup'].get('macs', 1.0))
            for model in result['models']})


def machine_description() -> str:
    info = machine_info('cpu')
    return (f'{info["cpu"]}, {info["logical_cores"]} logical cores, '
            f'torch {info["torch"]}')


def validation_size(data_root: Path) -> int:
    with open(data_root / 'cls' / 'meta' / 'val.txt', encoding='utf-8') as f:
        return sum(1 for line in f if line.strip())


# --------------------------------------------------------------------- main
def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description='HetDPT end to end on the embedded CPU demo: dense '
        'training, MAP, pruning, merging, DETR, UperNet, benchmark, report.')
    parser.add_argument('--quick', action='store_true',
                        help='the CI variant: tiny subsets and schedules')
    parser.add_argument('--work-dir', type=Path,
                        default=Path('work_dirs/demo'),
                        help='all outputs go here (default work_dirs/demo)')
    parser.add_argument('--data-root', type=Path,
                        default=Path(DEFAULT_DATA_ROOT),
                        help='demo datasets, made here if missing (default '
                        'data/demo)')
    parser.add_argument('--budget', type=int,
                        help='layers to remove in total, split by MAP '
                        f'(default {FULL.budget}, --quick {QUICK.budget})')
    parser.add_argument('--jobs', type=int,
                        default=max(1, min(2, os.cpu_count() or 1)),
                        help='independent jobs run side by side (default: '
                        'one per core, at most 2)')
    parser.add_argument('--threads', type=int,
                        help='torch / OpenMP threads per job (default: the '
                        'idle cores shared out among the jobs of a stage, '
                        'at least 1; benchmarks use 1)')
    parser.add_argument('--resume', action='store_true',
                        help='continue the earlier run in --work-dir, '
                        'skipping its finished stages')
    args = parser.parse_args(argv)
    for name in ('jobs', 'threads'):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f'--{name} must be >= 1')
    settings = QUICK if args.quick else FULL
    if args.budget is None:
        args.budget = settings.budget
    elif args.budget < 1:
        parser.error('--budget must be >= 1')
    args.mode = 'quick' if args.quick else 'full'
    args.command = shlex.join(['python', 'tools/demo.py'] + list(
        sys.argv[1:] if argv is None else argv))
    args.work_dir = args.work_dir.resolve()
    args.data_root = args.data_root.resolve()
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    settings = QUICK if args.quick else FULL
    demo = Demo(args, dataclasses.replace(settings, budget=args.budget))
    try:
        demo.run()
    except DemoError as err:
        print(f'error: {err}', file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    # SIGTERM as an exception, so that the running jobs are stopped too.
    signal.signal(signal.SIGTERM,
                  lambda signum, frame: sys.exit(128 + signum))
    sys.exit(main())
