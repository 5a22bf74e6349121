"""The demo's run: its stages in order, the work dir and the resumable
state (:class:`Demo`)."""

import dataclasses
import json
import shutil
import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from mmengine.logging import MMLogger

from hetdpt_mm.fileio import atomic_write_text

from .helpers import cpu_seconds, write_hook_config
from .jobs import JobRunner, load_average
from .report_format import duration
from .results import DemoResults, from_json, json_type, to_json
from .settings import (
    BACKBONE_OPTIONS,
    CLS_CLASSES,
    CLS_DATA,
    DEFAULT_DATA_ROOT,
    OUTPUTS,
    STATE_FILE,
    STATE_VERSION,
    TRANSFER_CONFIGS,
    DemoError,
    DemoInputError,
    DemoOptions,
)
from .stages_tome import TomeStages
from .stages_train import TrainingStages
from .stages_transfer import TransferStages
from .summary import ReportStage


class Demo(TrainingStages, TransferStages, TomeStages, ReportStage):
    """The stages of the demo; each writes its record into ``self.results``
    (:class:`~hetdpt_demo.results.DemoResults`), saved with the
    finished stages in ``<work_dir>/demo_state.json``."""

    STAGES = (
        ('data', 'make the demo datasets'),
        ('dense', 'train the dense classifier'),
        ('map', 'collect MAP points (attn / act / interleaved)'),
        (
            'recovery',
            'recovery asymmetry: remove one attention vs one GELU '
            'from the dense model, validate, fine-tune',
        ),
        ('fit', 'fit MAP and split the budget'),
        (
            'prune',
            'prune with HetDPTPruneHook and fine-tune: the MAP split, '
            'attention only, GELU only (each seed)',
        ),
        (
            'compare',
            'the naive split (raw scores ranked across types), '
            'pruned and fine-tuned the same way',
        ),
        ('merge', 'merge (tools/merge_ckpt.py)'),
        (
            'transfer',
            'DETR and UperNet from the merged backbone; test the '
            'merged classifier',
        ),
        (
            'plus',
            'HetDPT+: width-prune the merged model '
            '(tools/prune_width.py), fine-tune it; DETR and UperNet load it',
        ),
        ('benchmark', 'benchmark dense vs pruned vs merged'),
        (
            'tome',
            'token merging (ToMe): dense and HetDPT classifiers, '
            'DETR and UperNet at several r (no training)',
        ),
        ('report', 'write the report'),
    )

    def __init__(self, options: DemoOptions):
        self.options = options
        self.settings = options.settings
        self.repo: Path = options.repo
        self.work_dir: Path = options.work_dir
        self.data_root: Path = options.data_root
        self.state: Dict[str, Any] = dict(
            version=STATE_VERSION,
            mode=options.mode,
            # As JSON keeps it (tuples come back as lists), so that a
            # resumed run's settings compare equal.
            settings=json.loads(json.dumps(dataclasses.asdict(self.settings))),
            data_root=str(options.data_root),
            finished=[],
            seconds={},
            results={},
            commands=[],
            job_seconds={},
            job_threads={},
        )
        self.results = DemoResults()
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

    def transfer_work_dir(self, kind: str) -> Path:
        """Where a dense-prediction task trains and is tested."""
        return self.out(Path(TRANSFER_CONFIGS[kind]).stem)

    def transfer_options(self, kind: str, checkpoint: str) -> List[str]:
        """``--cfg-options`` starting a dense-prediction task's backbone
        from ``checkpoint``, on the demo data (:meth:`data_options`)."""
        return [
            f'model.backbone.init_cfg.checkpoint={checkpoint}'
        ] + self.data_options(kind)

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
        options += [
            f'{loader}.dataset.data_root={root}/{sub}' for loader in loaders
        ]
        if kind == 'cls':
            options.append(f'model.head.num_classes={CLS_CLASSES}')
        if kind == 'detr':
            # The COCO evaluator reads the annotation file itself.
            ann_file = f'{root}/coco/annotations/instances_val2017.json'
            options += [
                f'val_evaluator.ann_file={ann_file}',
                f'test_evaluator.ann_file={ann_file}',
            ]
        return options

    @staticmethod
    def train_argv(
        config: str,
        work_dir: str,
        options: Sequence[str],
        validate_first: bool = False,
    ) -> List[str]:
        """A training run; ``validate_first``: it also validates its
        starting point (``--validate-first``), so that no separate
        ``tools/test.py`` run is needed for it.  ``--overwrite``: a stage
        a resumed demo runs again starts its runs over."""
        argv = [
            'tools/train.py',
            config,
            '--work-dir',
            work_dir,
            '--overwrite',
        ]
        if validate_first:
            argv.append('--validate-first')
        return argv + (['--cfg-options', *options] if options else [])

    @staticmethod
    def test_argv(
        config: str,
        checkpoint: str,
        work_dir: str,
        metrics: str,
        options: Sequence[str],
        strict: bool = True,
    ) -> List[str]:
        argv = [
            'tools/test.py',
            config,
            checkpoint,
            '--work-dir',
            work_dir,
            '--out-metrics',
            metrics,
        ] + ([] if strict else ['--non-strict'])
        return argv + (['--cfg-options', *options] if options else [])

    def hook_config(
        self,
        job: str,
        config: str,
        hook_type: str,
        options: Mapping[str, Any],
        unset: Sequence[str] = (),
    ) -> str:
        """``config`` with options of its ``hook_type`` hook, written for
        ``job`` under ``<work_dir>/configs/`` (same file name: the merge hook
        names its output after it)."""
        path = self.out('configs', job, Path(config).name)
        write_hook_config(self.repo / config, hook_type, options, path, unset)
        return self.rel(path)

    def state_problem(self, state: Any) -> Optional[str]:
        """What is wrong with a state read back from its file (``None``:
        nothing): every entry of a new run's state with its JSON type, the
        stage bookkeeping and the stages' results in their form."""
        if not isinstance(state, dict):
            return f'it holds {json_type(state)}, not an object'
        for key, value in self.state.items():
            if key not in state:
                return f'it has no "{key}" entry'
            if json_type(state[key]) != json_type(value):
                return (
                    f'"{key}" is {json_type(state[key])}, not '
                    f'{json_type(value)}'
                )
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
            wrong = [
                (name, value)
                for name, value in times.items()
                if json_type(value) != 'a number'
            ]
            if wrong:
                return (
                    f'"{key}" holds {json.dumps(wrong[0][1])} for '
                    f'{wrong[0][0]}, not a number'
                )
        if json_type(state.get('load_before', 0)) != 'a number':
            return '"load_before" is not a number'
        if state['version'] == STATE_VERSION:  # others are refused later
            try:
                from_json(DemoResults, state['results'])
            except ValueError as err:
                return str(err)
        return None

    def read_state(self, path: Path) -> Dict[str, Any]:
        """The state an earlier run saved at ``path``."""
        try:
            state = json.loads(path.read_text())
        except OSError as err:
            raise DemoInputError(
                f'demo state {path} cannot be read: {err}'
            ) from None
        except (ValueError, RecursionError) as err:  # JSON, UTF-8, depth
            problem = err
        else:
            problem = self.state_problem(state)
        if problem is not None:
            raise DemoInputError(
                f'demo state {path} is malformed: '
                f'{problem}; delete it to start over'
            )
        return state

    def save_state(self) -> None:
        self.state['results'] = to_json(self.results)
        self.state['commands'] = self.jobs.commands
        self.state['job_seconds'] = self.jobs.durations
        self.state['job_threads'] = self.jobs.threads_used
        atomic_write_text(
            self.out(STATE_FILE), json.dumps(self.state, indent=1) + '\n'
        )

    # --------------------------------------------------------------- run
    def prepare_work_dir(self) -> None:
        """Resume an earlier run, or replace its outputs; never touch a
        directory the demo did not make."""
        state_path = self.out(STATE_FILE)
        if self.options.resume:
            if not state_path.is_file():
                raise DemoInputError(
                    f'--resume: {state_path} does not exist (no earlier demo '
                    'run in this work dir)'
                )
            state = self.read_state(state_path)
            if any(
                state[key] != self.state[key]
                for key in ('version', 'settings', 'data_root')
            ):
                raise DemoInputError(
                    f'--resume: the run in {self.work_dir} used other '
                    f'settings (mode {state.get("mode")!r}, data root '
                    f'{state.get("data_root")}); start it again without '
                    '--resume'
                )
            self.state.update(state)
            self.results = from_json(DemoResults, state['results'])
            return
        if self.work_dir.exists():
            if not self.work_dir.is_dir():
                raise DemoInputError(
                    f'--work-dir {self.work_dir} is not a directory'
                )
            if any(self.work_dir.iterdir()) and not state_path.is_file():
                raise DemoInputError(
                    f'--work-dir {self.work_dir} is not empty and holds no '
                    'earlier demo run: choose another --work-dir'
                )
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
            f'hetdpt_demo_{time.time_ns()}',
            logger_name='hetdpt_demo',
            log_file=str(self.out('demo.log')),
            file_mode='a' if self.options.resume else 'w',
        )
        self.jobs = JobRunner(
            self.logger,
            self.repo,
            self.out('logs'),
            self.options.threads,
            self.options.jobs,
        )
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
            f'{load_average():.2f}'
        )
        for number, (name, title) in enumerate(self.STAGES, 1):
            banner = (
                f'[{number}/{len(self.STAGES)}] {title} (elapsed '
                f'{duration(time.monotonic() - start)})'
            )
            if name in self.state['finished']:
                self.logger.info(
                    f'==== {banner}: done in an earlier run, skipped'
                )
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
            self.state.setdefault('cpu_seconds', {})[name] = (
                cpu_seconds() - cpu_start
            )
            self.state['finished'].append(name)
            self.save_state()
            self.logger.info(
                f'==== [{number}/{len(self.STAGES)}] done in {seconds:.1f} s'
            )
        self.logger.info(
            f'HetDPT demo finished in '
            f'{duration(time.monotonic() - start)}: report '
            f'{self.rel(self.out("report.md"))}\n' + self.results.headline
        )
