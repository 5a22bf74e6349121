"""HetDPT end to end on the embedded CPU demo (``tools/demo.py``).

The classification task is shape matching (:func:`~hetdpt_mm.datasets.
demo_data.make_pairs` with ``SHAPES_TASK``: do two distant glyphs have the
same shape, and which), on which token mixing and the GELUs matter; the
classifier configs were written for the digits and are pointed at it, at
patch size 8, with ``--cfg-options`` (the detectors' too).

Stages (each runs the project's own tools, exactly the commands a user
would type: training and tests as subprocesses, the short tools in this
process (``Job.in_process``); they are printed, logged under
``<work-dir>/logs/`` and listed in the report):

1. make the demo datasets (digits, shapes, toy COCO, toy ADE20K) if missing;
2. train the dense classifier (``configs/demo/vit-demo_digits.py``);
3. collect MAP points with ``MAPCollectHook`` from the dense checkpoint,
   schedules attn / act / interleaved
   (``configs/demo/vit-demo_digits_map.py``);
4. recovery asymmetry: remove the first attention layer and the first GELU
   the MAP schedules removed (``tools/merge_ckpt.py --spec``), validate
   at once, fine-tune a few epochs validating after each;
5. fit MAP and split the budget (``tools/fit_map.py``, plot; the split is
   read from its ``--save-allocation`` output);
6. prune with ``HetDPTPruneHook`` and fine-tune
   (``configs/demo/vit-demo_digits_hetdpt.py``): the MAP split (the main
   run), and for the comparison the attention-only and GELU-only splits of
   the same budget, once per seed; every run logs the gate-score
   gradients;
7. the naive split (the lowest raw gate scores, both types ranked
   together) pruned the same way;
8. merge (``tools/merge_ckpt.py``);
9. DETR and UperNet from the merged backbone: validate before training,
   train, validate after (``configs/demo/{detr,upernet}_hetdpt_demo.py``);
   test the merged classifier;
10. HetDPT+: width-prune the merged classifier, fine-tune it;
11. benchmark dense vs pruned vs merged, and every compared split
    (``tools/benchmark.py``);
12. write ``report.md``, ``summary.json`` and the plots.

Hook options are set by hook type, not by list position: a job whose hook
needs other options runs a config generated under ``<work-dir>/configs/``
that inherits the demo config (:func:`write_hook_config`).

The independent jobs of a stage run side by side (``--jobs``, default one
per core, at most 2).  Threads per job (``--threads``) default to the idle
cores, measured when the stage starts, shared out among its jobs: tiny
models on a busy machine are much slower with OpenMP threads that wait for
each other.  A new run replaces the outputs of an earlier demo run in the
work dir; ``--resume`` continues one instead, skipping its finished stages.
``--quick`` is the CI variant: the same stages on tiny subsets and
schedules (minutes; its accuracies mean nothing).  See docs/demo.md.
"""
import csv
import dataclasses
import io
import json
import math
import pprint
import resource
import shutil
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch
from mmengine.config import Config
from mmengine.logging import MMLogger

from .. import visualization as plots
from ..benchmark import machine_info
from ..checkpoint import load_checkpoint_file
from ..datasets import SHAPE_PAIR_CLASSES, make_all
from ..fileio import atomic_write_text
from ..hooks.map_collect_hook import POINT_COLUMNS
from ..hooks.prune_hook import STATE_KEY as PRUNE_STATE
from ..pruning import AnalyticCost, MAPFit, load_points, rank_across_types
from ..record import load_backbone_checkpoint, read_backbone_checkpoint
from ..spec import ACT, ATTN, PruneSpec
from . import demo_report
from .fit_map import load_allocation
from .jobs import Job, JobRunner, load_average

DENSE_CONFIG = 'configs/demo/vit-demo_digits.py'
MAP_CONFIG = 'configs/demo/vit-demo_digits_map.py'
PRUNE_CONFIG = 'configs/demo/vit-demo_digits_hetdpt.py'
DETR_CONFIG = 'configs/demo/detr_hetdpt_demo.py'
UPERNET_CONFIG = 'configs/demo/upernet_hetdpt_demo.py'
DEFAULT_DATA_ROOT = 'data/demo'
#: The classification task of the demo (``make_pairs``): its directory in
#: the data root and its number of classes (the configs' are the digits').
CLS_DATA = 'shapes'
CLS_CLASSES = len(SHAPE_PAIR_CLASSES)
#: ``--cfg-options`` for every model the demo classifier's backbone goes
#: into: patch 8 (the configs' 4 is the digits'): a 12-pixel glyph then
#: spans up to four patches at any offset, so telling its shape takes the
#: blocks' GELUs and attention, and the steps are about 2.4x cheaper.
#: UperNet's neck scales give its strides 4, 8, 16, 32 again.
CLS_PATCH_SIZE = 8
BACKBONE_OPTIONS = dict(
    cls=[f'model.backbone.patch_size={CLS_PATCH_SIZE}'],
    detr=[f'model.backbone.patch_size={CLS_PATCH_SIZE}'],
    upernet=[f'model.backbone.patch_size={CLS_PATCH_SIZE}',
             'model.neck.scales=[2,1,0.5,0.25]'])
STATE_FILE = 'demo_state.json'
# 2: the MAP allocation is read from fit_map's output and kept in the state.
# 3: the pairs task, the recovery and comparison stages.
# 4: validations inside the training runs replace tools/test.py runs.
# 5: the shapes task at patch 8; recovery runs on the prune runs' images.
STATE_VERSION = 5
#: What a demo run creates in its work dir (all of it is replaced by a new
#: run; nothing else there is touched).
OUTPUTS = ('configs', 'vit-demo_digits', 'map', 'recovery', 'compare',
           'vit-demo_digits_hetdpt',
           'detr_hetdpt_demo', 'upernet_hetdpt_demo', 'vit-demo_digits_plus',
           'benchmark', 'logs',
           'report.md', 'summary.json', 'accuracy_vs_speedup.png',
           'losses.png', 'score_grads.png', 'recovery.png',
           'comparison.png', 'demo.log', STATE_FILE)
MAP_SCHEDULES = ('attn', 'act', 'interleaved')


class DemoError(Exception):
    """A stage failed or the inputs are unusable; the message says which."""


class DemoInputError(DemoError):
    """The work dir or the saved state of an earlier run is unusable: bad
    input, found before anything runs."""


def json_type(value: Any) -> str:
    """How JSON names the type of a decoded ``value``."""
    if isinstance(value, bool):
        return 'a boolean'
    if isinstance(value, (int, float)):
        return 'a number'
    return {dict: 'an object', list: 'an array', str: 'a string'}.get(
        type(value), 'null')


@dataclasses.dataclass(frozen=True)
class Settings:
    """Sizes of one demo variant.  ``None`` keeps the config's value."""
    dense_epochs: Optional[int]
    dense_train_images: Optional[int]  # the first N images only
    map_steps: Dict[str, int]  # removal steps per schedule
    map_interval: int  # fine-tuning epochs per step
    map_subset: Union[int, float]  # fast fine-tune: images or fraction
    map_lr: float  # fast fine-tune: its constant learning rate
    map_calib_images: int  # TE score
    budget: int  # layers to remove, split by MAP
    prune_epochs: Optional[int]
    prune_train_images: Optional[int]  # and the recovery runs'
    detr_epochs: Optional[int]
    detr_train_images: Optional[int]
    upernet_iters: Optional[int]
    transfer_log_interval: Optional[int]  # iterations per logged loss
    bench_batch: int
    bench_repeats: int
    context_bench: bool  # also time DeiT-S at 224 (context)
    plus_ratio: float  # HetDPT+: channel ratio of the width pruning
    plus_epochs: int  # HetDPT+: fine-tuning epochs (>= 2: 1 of warm-up)
    plus_train_images: Optional[int]
    recovery_epochs: int  # after one removal (>= 2: 1 of warm-up)
    seeds: Tuple[int, ...]  # one prune run of every compared split each


# Sized for 10 minutes on 2 idle cores: the dense model learns the shapes
# in 20 epochs on all 4,000 training images; a MAP step fine-tunes two
# epochs on all of them at 2e-4 (one left the 4-attention point on a cliff
# the fit could not predict: CV RMSE 0.66 of the points' spread, 0.31 with
# two and every schedule one step past the budget; the MAP config's 5e-4
# gave points far off their neighbours; 500 images, noise-level points),
# the recovery, prune and HetDPT+ runs on the first half; 3 seeds per
# compared split (2 left a 4.75-point half range); DETR and UperNet train
# long enough to show that the pruned backbone transfers and improves
# (their configs' full schedules: 12 epochs, 400 iterations).
FULL = Settings(
    dense_epochs=20, dense_train_images=None,
    map_steps=dict(attn=5, act=5, interleaved=5), map_interval=2,
    map_subset=1.0, map_lr=2e-4, map_calib_images=128, budget=4,
    prune_epochs=6, prune_train_images=2000,
    detr_epochs=5, detr_train_images=None, upernet_iters=200,
    transfer_log_interval=None, bench_batch=64, bench_repeats=15,
    context_bench=True, plus_ratio=0.3, plus_epochs=3,
    plus_train_images=2000, recovery_epochs=2, seeds=(0, 1, 2))
QUICK = Settings(
    dense_epochs=2, dense_train_images=256,
    map_steps=dict(attn=2, act=2, interleaved=2), map_interval=1,
    map_subset=64, map_lr=2e-4, map_calib_images=64, budget=2,
    prune_epochs=3, prune_train_images=128,
    detr_epochs=1, detr_train_images=16, upernet_iters=4,
    transfer_log_interval=1, bench_batch=16, bench_repeats=2,
    context_bench=False, plus_ratio=0.3, plus_epochs=2,
    plus_train_images=128, recovery_epochs=2, seeds=(0, ))


@dataclasses.dataclass(frozen=True)
class DemoOptions:
    """One demo run as ``tools/demo.py`` was asked for it."""
    repo: Path  # the checkout whose tools and configs the jobs run
    work_dir: Path
    data_root: Path
    quick: bool = False
    budget: Optional[int] = None  # None: the variant's (FULL or QUICK)
    jobs: int = 1  # independent jobs side by side
    threads: Optional[int] = None  # per job; None: from the idle cores
    resume: bool = False
    command: str = ''  # how it was started, for the report

    @property
    def mode(self) -> str:
        return 'quick' if self.quick else 'full'

    @property
    def settings(self) -> Settings:
        variant = QUICK if self.quick else FULL
        if self.budget is None:
            return variant
        return dataclasses.replace(variant, budget=self.budget)


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


def counts_label(n_attn: int, n_act: int) -> str:
    """``attn<n>-act<m>``: how run keys, benchmark names and the report's
    speed table name a split by its removed counts."""
    return f'attn{n_attn}-act{n_act}'


def last_checkpoint(work_dir: Path) -> Path:
    """The checkpoint MMEngine saved last in ``work_dir``."""
    marker = work_dir / 'last_checkpoint'
    if not marker.is_file():
        raise DemoError(f'no checkpoint was saved in {work_dir} '
                        f'({marker} is missing)')
    return Path(marker.read_text().strip())


def write_hook_config(base: Path, hook_type: str, options: Mapping[str, Any],
                      path: Path, unset: Sequence[str] = ()) -> None:
    """Write a config to ``path`` that inherits ``base`` and gives its one
    ``hook_type`` hook ``options`` (and drops its keys ``unset``).

    ``--cfg-options custom_hooks.<i>.<key>=...`` would address the hook by
    its position in the list, silently reaching another hook when the
    config's list changes; here it is found by type.
    """
    hooks = [hook.to_dict() for hook in Config.fromfile(base).custom_hooks]
    matching = [hook for hook in hooks if hook['type'] == hook_type]
    if len(matching) != 1:
        raise DemoError(f'{base} has {len(matching)} {hook_type} hooks in '
                        'custom_hooks; the demo configures exactly one')
    for key in unset:
        matching[0].pop(key, None)
    matching[0].update(options)
    atomic_write_text(path, (
        f'# Written by the HetDPT demo: {base.name} with options of its '
        f'{hook_type}.\n_base_ = [{str(base)!r}]\n'
        f'custom_hooks = {pprint.pformat(hooks, sort_dicts=False)}\n'))


class Demo:
    """The stages of the demo; results accumulate in ``self.results`` and
    are saved with the finished stages in ``<work_dir>/demo_state.json``."""

    STAGES = (
        ('data', 'make the demo datasets'),
        ('dense', 'train the dense classifier'),
        ('map', 'collect MAP points (attn / act / interleaved)'),
        ('recovery', 'recovery asymmetry: remove one attention vs one GELU '
         'from the dense model, validate, fine-tune'),
        ('fit', 'fit MAP and split the budget'),
        ('prune', 'prune with HetDPTPruneHook and fine-tune: the MAP split, '
         'attention only, GELU only (each seed)'),
        ('compare', 'the naive split (raw scores ranked across types), '
         'pruned and fine-tuned the same way'),
        ('merge', 'merge (tools/merge_ckpt.py)'),
        ('transfer', 'DETR and UperNet from the merged backbone; test the '
         'merged classifier'),
        ('plus', 'HetDPT+: width-prune the merged model '
         '(tools/prune_width.py), fine-tune it; DETR and UperNet load it'),
        ('benchmark', 'benchmark dense vs pruned vs merged'),
        ('report', 'write the report'),
    )

    def __init__(self, options: DemoOptions):
        self.options = options
        self.settings = options.settings
        self.repo: Path = options.repo
        self.work_dir: Path = options.work_dir
        self.data_root: Path = options.data_root
        self.state: Dict[str, Any] = dict(
            version=STATE_VERSION, mode=options.mode,
            # As JSON keeps it (tuples come back as lists), so that a
            # resumed run's settings compare equal.
            settings=json.loads(json.dumps(dataclasses.asdict(
                self.settings))),
            data_root=str(options.data_root), finished=[], seconds={},
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
            return str(path.resolve().relative_to(self.repo))
        except ValueError:
            return str(path.resolve())

    def out(self, *parts: str) -> Path:
        return self.work_dir.joinpath(*parts)

    def data_options(self, kind: str) -> List[str]:
        """``--cfg-options`` pointing a demo config at ``--data-root`` (not
        needed for the configs' own ``data/demo``), the classifier configs
        (written for the digits) at the shapes task, and every config at
        the demo classifier's patch size (``BACKBONE_OPTIONS``)."""
        root = self.rel(self.data_root)
        options = list(BACKBONE_OPTIONS[kind])
        if root == DEFAULT_DATA_ROOT and kind != 'cls':
            return options
        loaders = ('train_dataloader', 'val_dataloader', 'test_dataloader')
        sub = dict(cls=CLS_DATA, detr='coco', upernet='ade')[kind]
        options += [f'{loader}.dataset.data_root={root}/{sub}'
                    for loader in loaders]
        if kind == 'cls':
            options.append(f'model.head.num_classes={CLS_CLASSES}')
        if kind == 'detr':
            # The COCO evaluator reads the annotation file itself.
            ann_file = f'{root}/coco/annotations/instances_val2017.json'
            options += [f'val_evaluator.ann_file={ann_file}',
                        f'test_evaluator.ann_file={ann_file}']
        return options

    @staticmethod
    def train_argv(config: str, work_dir: str, options: Sequence[str],
                   validate_first: bool = False) -> List[str]:
        """A training run; ``validate_first``: it also validates its
        starting point (``--validate-first``), so that no separate
        ``tools/test.py`` run is needed for it.  ``--overwrite``: a stage
        a resumed demo runs again starts its runs over."""
        argv = ['tools/train.py', config, '--work-dir', work_dir,
                '--overwrite']
        if validate_first:
            argv.append('--validate-first')
        return argv + (['--cfg-options', *options] if options else [])

    @staticmethod
    def test_argv(config: str, checkpoint: str, work_dir: str,
                  metrics: str, options: Sequence[str],
                  strict: bool = True) -> List[str]:
        argv = ['tools/test.py', config, checkpoint, '--work-dir', work_dir,
                '--out-metrics', metrics] + ([] if strict else
                                             ['--non-strict'])
        return argv + (['--cfg-options', *options] if options else [])

    def hook_config(self, job: str, config: str, hook_type: str,
                    options: Mapping[str, Any],
                    unset: Sequence[str] = ()) -> str:
        """``config`` with options of its ``hook_type`` hook, written for
        ``job`` under ``<work_dir>/configs/`` (same file name: the merge hook
        names its output after it)."""
        path = self.out('configs', job, Path(config).name)
        write_hook_config(self.repo / config, hook_type, options, path,
                          unset)
        return self.rel(path)

    def state_problem(self, state: Any) -> Optional[str]:
        """What is wrong with a state read back from its file (``None``:
        nothing): every entry of a new run's state with its JSON type, the
        stage bookkeeping in its form.  Stage results are checked by the
        stages that read them."""
        if not isinstance(state, dict):
            return f'it holds {json_type(state)}, not an object'
        for key, value in self.state.items():
            if key not in state:
                return f'it has no "{key}" entry'
            if json_type(state[key]) != json_type(value):
                return (f'"{key}" is {json_type(state[key])}, not '
                        f'{json_type(value)}')
        for key in ('finished', 'commands'):
            wrong = [item for item in state[key] if not isinstance(item, str)]
            if wrong:
                return f'"{key}" holds {json.dumps(wrong[0])}, not a string'
        stages = {name for name, _ in self.STAGES}
        unknown = [name for name in state['finished'] if name not in stages]
        if unknown:
            return f'"finished" names an unknown stage, {unknown[0]!r}'
        for key in ('seconds', 'cpu_seconds', 'job_seconds', 'job_threads'):
            times = state.get(key, {})
            if not isinstance(times, dict):
                return f'"{key}" is {json_type(times)}, not an object'
            wrong = [(name, value) for name, value in times.items()
                     if json_type(value) != 'a number']
            if wrong:
                return (f'"{key}" holds {json.dumps(wrong[0][1])} for '
                        f'{wrong[0][0]}, not a number')
        if json_type(state.get('load_before', 0)) != 'a number':
            return '"load_before" is not a number'
        return None

    def read_state(self, path: Path) -> Dict[str, Any]:
        """The state an earlier run saved at ``path``."""
        try:
            state = json.loads(path.read_text())
        except OSError as err:
            raise DemoInputError(f'demo state {path} cannot be read: '
                                 f'{err}') from None
        except (ValueError, RecursionError) as err:  # JSON, UTF-8, depth
            problem = err
        else:
            problem = self.state_problem(state)
        if problem is not None:
            raise DemoInputError(f'demo state {path} is malformed: '
                                 f'{problem}; delete it to start over')
        return state

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
        if self.options.resume:
            if not state_path.is_file():
                raise DemoInputError(
                    f'--resume: {state_path} does not exist (no earlier demo '
                    'run in this work dir)')
            state = self.read_state(state_path)
            if any(state[key] != self.state[key]
                   for key in ('version', 'settings', 'data_root')):
                raise DemoInputError(
                    f'--resume: the run in {self.work_dir} used other '
                    f'settings (mode {state.get("mode")!r}, data root '
                    f'{state.get("data_root")}); start it again without '
                    '--resume')
            self.state.update(state)
            self.results = self.state['results']
            return
        if self.work_dir.exists():
            if not self.work_dir.is_dir():
                raise DemoInputError(f'--work-dir {self.work_dir} is not a '
                                     'directory')
            if any(self.work_dir.iterdir()) and not state_path.is_file():
                raise DemoInputError(
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
            file_mode='a' if self.options.resume else 'w')
        self.jobs = JobRunner(self.logger, self.repo, self.out('logs'),
                              self.options.threads, self.options.jobs)
        self.jobs.commands = list(self.state['commands'])
        self.jobs.durations = dict(self.state['job_seconds'])
        self.jobs.threads_used = dict(self.state['job_threads'])
        self.state.setdefault('load_before', load_average())
        start = time.monotonic() - sum(self.state['seconds'].values())
        self.logger.info(
            f'HetDPT demo ({self.options.mode}): work dir '
            f'{self.rel(self.work_dir)}, data {self.rel(self.data_root)}, '
            f'up to {self.options.jobs} parallel job(s), '
            f'{self.options.threads or "auto"} thread(s) each, load average '
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
            cpu_start = cpu_seconds()
            try:
                getattr(self, f'stage_{name}')()
            except (OSError, ValueError) as err:
                raise DemoError(f'stage "{title}": {err}') from err
            seconds = time.monotonic() - stage_start
            self.state['seconds'][name] = seconds
            self.state.setdefault('cpu_seconds', {})[name] = \
                cpu_seconds() - cpu_start
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
        record = load_backbone_checkpoint(checkpoint, mmap=True).record
        # The last validation is of the last checkpoint, on the test split.
        self.results['dense'] = dict(
            checkpoint=self.rel(checkpoint), arch=record.arch,
            depth=record.spec.depth,
            accuracy=last_accuracy(self.out('vit-demo_digits')))

    def stage_map(self) -> None:
        s = self.settings
        dense = self.results['dense']
        jobs = {}
        for schedule in MAP_SCHEDULES:
            steps = s.map_steps[schedule]
            name = f'map-{schedule}'
            config = self.hook_config(
                name, MAP_CONFIG, 'MAPCollectHook',
                dict(schedule=schedule, interval=s.map_interval,
                     max_removed=steps, calib_images=s.map_calib_images))
            options = [
                f'load_from={dense["checkpoint"]}',
                f'train_cfg.max_epochs={steps * s.map_interval}',
                f'train_dataloader.sampler.subset={s.map_subset}',
                f'optim_wrapper.optimizer.lr={s.map_lr}',
            ] + self.data_options('cls')
            jobs[schedule] = Job(name, self.train_argv(
                config, self.rel(self.out('map', schedule)), options))
        self.jobs.run_lanes([[jobs[name]] for name in MAP_SCHEDULES])
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

    def stage_recovery(self) -> None:
        """Recovery asymmetry (METHOD.md §2): remove from the dense model
        the one attention layer, or the one GELU, that the MAP schedules
        removed first (the TE score's choice); validate at once
        (``--validate-first``), then fine-tune ``recovery_epochs`` epochs,
        validating after each."""
        s = self.settings
        depth = self.results['dense']['depth']
        prune_lr = Config.fromfile(
            self.repo / PRUNE_CONFIG).optim_wrapper.optimizer.lr
        lanes, runs = [], {}
        for kind in (ATTN, ACT):
            first = next(p for p in self.results['map']['points']
                         if p['schedule'] == kind and p['step'] == '1')
            block = int(first[f'removed_{kind}'])
            spec = PruneSpec(depth, **{f'{kind}_removed': [block]})
            work = self.out('recovery', kind)
            start = self.rel(work / 'start.pth')
            # Built from the pruned start (its record gives the structure),
            # fine-tuned as the prune runs fine-tune: their learning rate,
            # pos_embed at 1x (the dense 1e-3 cost more in its warm-up epoch
            # than the removal did).
            options = ['model.backbone.init_cfg.type=Pretrained',
                       f'model.backbone.init_cfg.checkpoint={start}',
                       f'load_from={start}',
                       f'optim_wrapper.optimizer.lr={prune_lr}',
                       'optim_wrapper.paramwise_cfg.custom_keys.pos_embed.'
                       'lr_mult=1.0',
                       f'train_cfg.max_epochs={s.recovery_epochs}',
                       'train_cfg.val_interval=1'] + self.data_options('cls')
            if s.prune_train_images is not None:
                options.append('train_dataloader.dataset.indices='
                               f'{s.prune_train_images}')
            lanes.append([
                Job(f'recovery-{kind}-remove', [
                    'tools/merge_ckpt.py', self.results['dense']['checkpoint'],
                    start, '--spec', spec.to_json(), '--form', 'pruned',
                    '--force'], in_process=True),
                Job(f'recovery-{kind}-train', self.train_argv(
                    DENSE_CONFIG, self.rel(work), options,
                    validate_first=True))])
            runs[kind] = dict(block=block, work=work)
        self.jobs.run_lanes(lanes)
        self.results['recovery'] = {}
        for kind, run in runs.items():
            at_once, *after_epochs = [
                record['accuracy/top1']
                for record in demo_report.val_records(run['work'])]
            self.results['recovery'][kind] = dict(
                block=run['block'], at_once=at_once,
                after_epochs=after_epochs)

    def stage_fit(self) -> None:
        depth = self.results['dense']['depth']
        fit_path = self.out('map', 'map_fit.json')
        allocation_path = self.out('map', 'map_allocation.json')
        self.jobs.run_lanes([[Job('fit-map', [
            'tools/fit_map.py', self.rel(self.out('map', 'map_points.csv')),
            '--depth', str(depth), '--budget', str(self.settings.budget),
            '--bounds', 'full', '--plot',
            self.rel(self.out('map', 'map_fit.png')), '--save-fit',
            self.rel(fit_path), '--save-allocation',
            self.rel(allocation_path), '--force'], show_all=True,
            in_process=True)]])
        fit = MAPFit.from_dict(demo_report.read_json(fit_path))
        allocation = load_allocation(allocation_path, 'full')
        self.results['map'].update(
            fit=fit.to_dict(), bounds='full', fit_path=self.rel(fit_path),
            allocation=allocation.to_dict(), degree=fit.degree,
            cv_mae=fit.cv_mae, cv_rmse=fit.cv_rmse,
            n_attn=allocation.n_attn, n_act=allocation.n_act,
            predicted=allocation.best.predicted_accuracy)

    def prune_job(self, name: str, counts: Sequence[int], seed: int,
                  work: Path) -> Job:
        """A ``HetDPTPruneHook`` run from the dense model removing
        ``counts`` = (attention, GELU) layers, with the demo's fine-tuning
        and seed ``seed``; it logs the gate-score gradients."""
        s = self.settings
        config = self.hook_config(
            name, PRUNE_CONFIG, 'HetDPTPruneHook',
            dict(counts=dict(attn=counts[0], act=counts[1]),
                 log_score_grads=True),
            unset=('map_points', 'map_fit', 'budget'))
        options = [f'load_from={self.results["dense"]["checkpoint"]}',
                   f'randomness.seed={seed}']
        options += classifier_schedule_options(s.prune_epochs,
                                               s.prune_train_images)
        options += self.data_options('cls')
        return Job(name, self.train_argv(config, self.rel(work), options))

    def compare_lane(self, key: str) -> List[Job]:
        """Prune and merge (the run's MergeCheckpointHook) one compared run
        (not the main one: the later stages handle that); its accuracy is
        its last validation, gates closed: the merged model's function (the
        main run checks that merging changes no prediction)."""
        run = self.results['compare']['runs'][key]
        work = self.out('compare', key)
        merged = work / f'{Path(PRUNE_CONFIG).stem}_merged.pth'
        run.update(merged=self.rel(merged), work=self.rel(work))
        return [self.prune_job(f'compare-{key}', run['counts'], run['seed'],
                               work)]

    def add_compare_run(self, split: str, counts: Sequence[int],
                        seed: int) -> str:
        """Register ``split`` (a name) at ``counts`` for ``seed``; splits
        with the same counts share one run.  Returns the run's key."""
        runs = self.results['compare']['runs']
        key = f'{counts_label(*counts)}_seed{seed}'
        runs.setdefault(key, dict(counts=list(counts), seed=seed, splits=[]))
        runs[key]['splits'].append(split)
        return key

    def stage_prune(self) -> None:
        """The MAP split (the main run: merged, transferred, benchmarked by
        the later stages) beside the single-type splits of the same budget,
        each with the same fine-tuning, once per seed."""
        s = self.settings
        split = self.results['map']
        counts = dict(MAP=(split['n_attn'], split['n_act']),
                      attention_only=(s.budget, 0), gelu_only=(0, s.budget))
        self.results['compare'] = dict(runs={}, naive={}, seeds=list(s.seeds))
        main_key = None
        for seed in s.seeds:
            for name, value in counts.items():
                key = self.add_compare_run(name, value, seed)
                if main_key is None:
                    main_key = key
        work = self.out('vit-demo_digits_hetdpt')
        self.results['compare']['runs'][main_key].update(
            main=True, work=self.rel(work))
        lanes = [[self.prune_job('prune-train', counts['MAP'], s.seeds[0],
                                 work)]]
        lanes += [self.compare_lane(key) for key in
                  self.results['compare']['runs'] if key != main_key]
        self.jobs.run_lanes(lanes)
        checkpoint = last_checkpoint(work)
        loaded = load_checkpoint_file(checkpoint, mmap=True)
        spec = read_backbone_checkpoint(loaded, checkpoint).record.spec
        self.results['prune'] = dict(
            checkpoint=self.rel(checkpoint),
            # The run's last validation: the last checkpoint, gates closed.
            accuracy=last_accuracy(work),
            hook_merged=self.rel(work / 'vit-demo_digits_hetdpt_merged.pth'),
            spec=dict(spec.to_dict(), n_attn=spec.n_attn, n_act=spec.n_act),
            decisions=loaded['meta'][PRUNE_STATE]['decisions'],
            score_grads={kind: demo_report.scalar_curve(
                demo_report.train_scalars(work), f'score_grad_{kind}')
                for kind in (ATTN, ACT)})
        self.read_compare_runs()

    def read_compare_runs(self) -> None:
        """Checkpoint, decisions and merged accuracy of the finished
        compared runs (the main one's accuracy comes with the merge)."""
        for run in self.results['compare']['runs'].values():
            if run.get('main') or 'accuracy' in run:
                continue
            work = self.repo / run['work']
            checkpoint = last_checkpoint(work)
            run.update(
                checkpoint=self.rel(checkpoint),
                decisions=load_checkpoint_file(checkpoint, mmap=True)[
                    'meta'][PRUNE_STATE]['decisions'],
                accuracy=last_accuracy(work))

    def stage_compare(self) -> None:
        """The naive allocation HetDPT argues against: the budget's layers
        with the lowest raw gate scores, both types ranked together, read
        from the MAP run of the same seed when it closed its first layer
        (every run of a seed is identical until then); then pruned with the
        same fine-tuning as the other splits."""
        compare = self.results['compare']
        runs = compare['runs']
        new = []
        for seed in compare['seeds']:
            source = next(run for run in runs.values()
                          if 'MAP' in run['splits'] and run['seed'] == seed)
            first = source['decisions'][0] if not source.get('main') else \
                self.results['prune']['decisions'][0]
            removed = rank_across_types(first['gate_scores'],
                                        self.settings.budget)
            counts = (len(removed[ATTN]), len(removed[ACT]))
            compare['naive'][str(seed)] = dict(
                scores=first['gate_scores'], removed=removed,
                counts=list(counts))
            key = self.add_compare_run('naive', counts, seed)
            if 'accuracy' not in runs[key] and not runs[key].get('main'):
                new.append(key)
        self.jobs.run_lanes([self.compare_lane(key) for key in new])
        self.read_compare_runs()

    def stage_merge(self) -> None:
        prune = self.results['prune']
        work = self.out('vit-demo_digits_hetdpt')
        merged = self.rel(work / 'merged.pth')
        self.jobs.run_lanes([
            [Job('merge', ['tools/merge_ckpt.py', prune['checkpoint'], merged,
                           '--force'], show_all=True, in_process=True)]])
        prune.update(
            merged=merged,
            hook_output_identical=self.same_weights(
                self.repo / merged, self.repo / prune['hook_merged']))

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
            # Validated before training (the classifier's backbone, neck
            # and heads as initialised) and after it (the last checkpoint).
            lanes.append([Job(f'{kind}-train', self.train_argv(
                config, self.rel(self.out(Path(config).stem)),
                [f'model.backbone.init_cfg.checkpoint={merged}'] +
                self.data_options(kind) + overrides[kind],
                validate_first=True))])
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
        for kind, config, metric in (('detr', DETR_CONFIG, 'coco/bbox_mAP'),
                                     ('upernet', UPERNET_CONFIG, 'mIoU')):
            work = self.out(Path(config).stem)
            curve = demo_report.scalar_curve(demo_report.train_scalars(work))
            validations = demo_report.val_records(work, metric)
            self.results[kind] = dict(
                before=validations[0], after=validations[-1],
                loss_curve=curve, loss_first=curve[0][1],
                loss_last=curve[-1][1], iterations=curve[-1][0],
                checkpoint=self.rel(last_checkpoint(work)))

    def stage_plus(self) -> None:
        """HetDPT+: the merged classifier pruned in width (magnitude
        importance), fine-tuned briefly, validated before and after; the
        demo's DETR and UperNet configs build on it and are tested
        untrained (their necks take its embedding width)."""
        s = self.settings
        work = self.out('vit-demo_digits_plus')
        pruned = self.rel(work / 'plus.pth')
        report = work / 'plus_report.json'
        # The structure at build time (the optimizer takes its parameters),
        # the heads with the rest of the classifier; a fine-tune: pos_embed
        # at the base learning rate (as the demo's other fine-tunes).
        start = ['model.backbone.init_cfg.type=Pretrained',
                 f'model.backbone.init_cfg.checkpoint={pruned}',
                 f'load_from={pruned}',
                 'optim_wrapper.paramwise_cfg.custom_keys.pos_embed.lr_mult'
                 '=1.0']
        self.jobs.run_lanes([[
            Job('plus-prune', [
                'tools/prune_width.py', self.results['prune']['merged'],
                pruned, '--ratio', str(s.plus_ratio), '--importance',
                'magnitude', '--report', self.rel(report), '--plot',
                self.rel(work / 'widths.png'), '--force'], show_all=True,
                in_process=True),
            # Validated right after the width pruning and after the
            # fine-tune.
            Job('plus-train', self.train_argv(
                DENSE_CONFIG, self.rel(work), start +
                self.data_options('cls') +
                classifier_schedule_options(s.plus_epochs,
                                            s.plus_train_images),
                validate_first=True))]])
        trained = self.rel(last_checkpoint(work))
        lanes = []
        for kind, config in (('detr', DETR_CONFIG),
                             ('upernet', UPERNET_CONFIG)):
            # Their own work dirs: a test never runs where its input is.
            lanes.append([Job(f'plus-{kind}-test', self.test_argv(
                config, trained, self.rel(self.out(Path(config).stem)),
                self.rel(work / f'test_metrics_{kind}.json'),
                [f'model.backbone.init_cfg.checkpoint={trained}'] +
                self.data_options(kind), strict=False))])
        self.jobs.run_lanes(lanes)
        width = demo_report.read_json(report)
        validations = demo_report.val_records(work)
        self.results['plus'] = dict(
            checkpoint=trained, ratio=width['ratio'], epochs=s.plus_epochs,
            widths=width['spec']['widths'],
            macs=[width['macs_before'], width['macs_after']],
            params=[width['params_before'], width['params_after']],
            accuracy_before=validations[0]['accuracy/top1'],
            accuracy=validations[-1]['accuracy/top1'],
            detr=demo_report.read_json(work / 'test_metrics_detr.json'),
            upernet=demo_report.read_json(work / 'test_metrics_upernet.json'))

    def stage_benchmark(self) -> None:
        s = self.settings
        out = self.out('benchmark')
        # One thread unless told, timed by the process's CPU time: on a
        # shared machine that is what other jobs cannot inflate.
        threads = self.options.threads or 1
        common = ['--threads', str(threads), '--force'] + (
            ['--clock', 'process'] if threads == 1 else [])
        runs = dict(demo=[
            'tools/benchmark.py', 'backbone', '--checkpoint',
            self.results['prune']['checkpoint'], '--prefix', 'backbone.',
            '--img-size', '32', '--batch-size', str(s.bench_batch),
            '--repeats', str(s.bench_repeats)])
        # The other splits of the comparison (speed depends on the counts
        # only): each one's first seed, dense vs merged.
        for counts, run in self.split_benchmark_runs().items():
            runs[f'split-{counts}'] = [
                'tools/benchmark.py', 'backbone', '--checkpoint',
                run['checkpoint'], '--prefix', 'backbone.', '--models',
                'dense', 'merged', '--img-size', '32', '--batch-size',
                str(s.bench_batch), '--repeats', str(s.bench_repeats)]
        if s.context_bench:
            # For context: DeiT-S at 224 with the authors' DeiT-B spec.
            runs['context'] = ['tools/benchmark.py', 'backbone', '--arch',
                               'deit-small', '--batch-size', '4',
                               '--repeats', '3']
        lane = [Job(f'benchmark-{name}', argv + common + [
            '--json', self.rel(out / f'{name}.json'), '--md',
            self.rel(out / f'{name}.md')], show_all=True, in_process=True)
            for name, argv in runs.items()]
        # Timings only mean something with nothing else of ours running.
        self.jobs.run_lanes([lane])
        self.results['benchmark'] = {
            name: condense_benchmark(
                demo_report.read_json(out / f'{name}.json'),
                (out / f'{name}.md').read_text(encoding='utf-8'))
            for name in runs}

    def split_benchmark_runs(self) -> Dict[str, Dict[str, Any]]:
        """One run per removed-counts pair other than the main run's,
        keyed ``attn<n>-act<m>``."""
        main = self.results['prune']['spec']
        chosen = {}
        for run in self.results['compare']['runs'].values():
            counts = counts_label(*run['counts'])
            if run.get('main') or run['counts'] == [main['n_attn'],
                                                    main['n_act']]:
                continue
            chosen.setdefault(counts, run)
        return chosen

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
        plots.write_image(
            self.out('accuracy_vs_speedup.png'),
            plots.plot_accuracy_vs_speedup(
                *zip(*removal_steps),
                [dict(name=name, accuracy=summary['classification'][name][
                    'accuracy'], speedup=summary['benchmark']['demo'][
                        'models'][name]['speedup'])
                 for name in ('dense', 'pruned', 'merged')]))
        claims = summary['claims']
        plots.write_image(self.out('score_grads.png'), plots.plot_score_grads(
            self.results['prune']['score_grads'],
            self.results['prune']['decisions']))
        plots.write_image(self.out('recovery.png'), plots.plot_recovery(
            claims['recovery'], summary['classification']['dense'][
                'accuracy']))
        plots.write_image(self.out('comparison.png'),
                          plots.plot_split_comparison(
                              claims['splits'], summary['classification'][
                                  'dense']['accuracy']))
        plots.write_image(self.out('losses.png'), plots.plot_losses(
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
            mode=self.options.mode, command=self.options.command,
            machine=machine_description(), jobs=self.options.jobs,
            threads=self.options.threads or 'auto',
            job_threads=self.jobs.threads_used,
            load_before=self.state['load_before'],
            load_after=load_average(),
            finished_at=datetime.now().isoformat(timespec='seconds'),
            wall_seconds=total,
            stages=[dict(name=name, title=title,
                         seconds=self.state['seconds'].get(name, 0.0),
                         cpu_seconds=self.state.get('cpu_seconds', {}).get(
                             name, 0.0))
                    for name, title in self.STAGES if name != 'report'],
            job_seconds=self.jobs.durations,
            commands=self.jobs.commands,
            classification=dict(
                arch=r['dense']['arch'].get('arch'),
                patch_size=r['dense']['arch']['patch_size'],
                depth=r['dense']['depth'], budget=self.settings.budget,
                classes=CLS_CLASSES,
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
                    'fit', 'bounds', 'allocation', 'interval', 'degree',
                    'cv_mae', 'cv_rmse', 'n_attn', 'n_act', 'predicted')}),
            detr=r['detr'], upernet=r['upernet'], plus=r['plus'],
            benchmark=r['benchmark'], compare=r['compare'],
            claims=self.claims(cost))

    def claims(self, cost: AnalyticCost) -> Dict[str, Any]:
        """The numbers behind the report's claims section."""
        r = self.results
        types = {}
        for kind, curve in r['prune']['score_grads'].items():
            values = sorted(value for _, value in curve)
            types[kind] = dict(mean=sum(values) / len(values),
                               median=values[len(values) // 2],
                               count=len(values))
        speed = {counts_label(r['prune']['spec']['n_attn'],
                              r['prune']['spec']['n_act']):
                 r['benchmark']['demo']['models']['merged']}
        for counts in self.split_benchmark_runs():
            speed[counts] = r['benchmark'][f'split-{counts}']['models'][
                'merged']
        splits = []
        for name in ('MAP', 'attention_only', 'gelu_only', 'naive'):
            # The naive ranking may split the budget differently per seed:
            # one row per split, never a mean over different networks.
            groups: Dict[Tuple[int, int], List[Dict[str, Any]]] = {}
            for run in sorted((run for run in r['compare']['runs'].values()
                               if name in run['splits']),
                              key=lambda run: run['seed']):
                groups.setdefault(tuple(run['counts']), []).append(run)
            for (n_attn, n_act), runs in groups.items():
                splits.append(dict(
                    name=name if len(groups) == 1 else
                    f'{name} ({n_attn} + {n_act})', method=name,
                    n_attn=n_attn, n_act=n_act,
                    seeds=[run['seed'] for run in runs],
                    accuracies=[r['prune']['merged_accuracy']
                                if run.get('main') else run['accuracy']
                                for run in runs],
                    speedup=speed[counts_label(n_attn, n_act)]['speedup'],
                    macs_speedup=cost.speedup(n_attn, n_act)))
        for split in splits:
            split['mean'] = sum(split['accuracies']) / len(split[
                'accuracies'])
        ours = splits[0]
        seeds = f'mean over {len(ours["accuracies"])} seed(s)'
        rivals = [split for split in splits[1:]
                  if (split['n_attn'], split['n_act']) !=
                  (ours['n_attn'], ours['n_act'])]
        best = max(rivals, key=lambda split: split['mean'], default=None)
        if best is None:
            verdict = (f'Every split of this budget is MAP\'s own '
                       f'({ours["n_attn"]} + {ours["n_act"]}): nothing to '
                       'compare.')
        elif ours['mean'] > best['mean']:
            verdict = (f'**MAP\'s split is the most accurate** '
                       f'({ours["mean"]:.2f} % against at best '
                       f'{best["mean"]:.2f} % for the other splits, '
                       f'{seeds}).')
        elif ours['mean'] < best['mean']:
            verdict = (f'**MAP\'s split is not the most accurate here**: '
                       f'{best["name"]} reaches {best["mean"]:.2f} % against '
                       f'its {ours["mean"]:.2f} % ({seeds}).')
        else:
            # A tie in accuracy is decided by measured speed.
            tied = [split for split in rivals
                    if split['mean'] == ours['mean']]
            fastest = max(tied, key=lambda split: split['speedup'])
            verdict = (f'**No split is more accurate: {ours["name"]} ties '
                       f'with {", ".join(split["name"] for split in tied)} '
                       f'at {ours["mean"]:.2f} %** ({seeds}); ' + (
                           f'at equal accuracy {fastest["name"]} '
                           f'({fastest["n_attn"]} + {fastest["n_act"]}) is '
                           f'faster ({fastest["speedup"]:.2f}x against '
                           f'{ours["speedup"]:.2f}x), so on this task MAP\'s '
                           'split does not win.'
                           if fastest['speedup'] > ours['speedup'] else
                           'MAP\'s split is at least as fast.'))
        own = [split['name'] for split in splits[1:] if split not in rivals]
        if own:
            verdict += (f' ({", ".join(own)} removes MAP\'s own counts here: '
                        'the same split, not a rival.)')
        return dict(score_grads=dict(
            types=types, ratio=types[ACT]['mean'] / types[ATTN]['mean']),
            recovery=r['recovery'], splits=splits, verdict=verdict)


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


def last_accuracy(run_dir: Path) -> float:
    """Top-1 of the last validation of the classifier training run in
    ``run_dir``: its last checkpoint on the test split (the demo's val and
    test sets are one)."""
    return demo_report.val_records(run_dir)[-1]['accuracy/top1']


def cpu_seconds() -> float:
    """CPU time (user + system) of this process (its in-process jobs) and
    its finished subprocesses: a stage's difference is what its jobs cost,
    whatever else the machine runs (an idle 2-core machine runs two jobs
    side by side)."""
    return sum(usage.ru_utime + usage.ru_stime for usage in (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN)))


def machine_description() -> str:
    info = machine_info('cpu')
    return (f'{info["cpu"]}, {info["logical_cores"]} logical cores, '
            f'torch {info["torch"]}')


def validation_size(data_root: Path) -> int:
    with open(data_root / CLS_DATA / 'meta' / 'val.txt',
              encoding='utf-8') as f:
        return sum(1 for line in f if line.strip())
