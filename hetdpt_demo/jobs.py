"""A small job pool for the demo: runs the project's tools as subprocesses,
independent ones side by side, with a filtered live view of their output
(the full output goes to one log file per job), and shares the cores out
among the jobs of a stage."""

import contextlib
import dataclasses
import importlib.util
import io
import os
import re
import shlex
import subprocess
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Union

__all__ = [
    'JobError',
    'Job',
    'JobRunner',
    'default_jobs',
    'load_average',
    'stage_threads',
]

#: Log lines of the subprocesses shown on the console (all are in the logs).
PROGRESS_LINE = re.compile(
    r'Epoch\((?:val|test)\)|Iter\((?:val|test)\)|MAPCollectHook (?:point|'
    r'step \d+: removed)|HetDPT prune \d|HetDPT prune counts|spec now|'
    r'merged checkpoint written|Traceback|Error|error:'
)
TRAIN_LINE = re.compile(
    r'((?:Epoch|Iter)\(train\)\s*(?:\[\d+\])?\s*'
    r'\[\s*\d+/\d+\])'
)
MMENGINE_PREFIX = re.compile(
    r'^(?:\d{4}/)?\d\d/\d\d \d\d:\d\d:\d\d - \S+ - '
    r'\w+ - '
)
NOISY_FIELDS = re.compile(
    r'\s+(?:data_time|time|base_lr|lr|grad_norm|eta): '
    r'\S+'
)
TRAIN_LINE_SECONDS = 20  # at most one training line per job this often


class JobError(Exception):
    """A job failed; the message has its command and the end of its log."""


@dataclasses.dataclass
class Job:
    """One subprocess: ``python ARGV...`` from the repository root."""

    name: str
    #: the arguments, or a function giving them when the job starts (its
    #: input is made by an earlier job of the same lane)
    argv: Union[List[str], Callable[[], List[str]]]
    show_all: bool = False  # print every line (short tools) or progress only
    #: run the tool's ``main(argv)`` in the demo's own process: for short
    #: tools that need no MMEngine runner, a new interpreter's start-up
    #: (seconds of imports) would cost more than their work
    in_process: bool = False
    last_train_line: float = -float('inf')  # when a training line was shown


class JobRunner:
    """Runs jobs as subprocesses in ``cwd`` with a live, filtered view of
    their output; the full output of each goes to ``<log_dir>/<name>.log``."""

    def __init__(
        self,
        logger,
        cwd: Path,
        log_dir: Path,
        threads: Optional[int],
        jobs: int,
    ):
        self.logger = logger
        self.cwd = cwd
        self.log_dir = log_dir
        self.threads = threads  # None: chosen per stage (stage_threads)
        self.jobs = jobs
        self.commands: List[str] = []
        self.durations: Dict[str, float] = {}
        self.threads_used: Dict[str, int] = {}
        self._lock = threading.Lock()
        # One in-process job at a time: they share sys.stdout / sys.stderr.
        self._in_process_lock = threading.Lock()
        self._running: set = set()
        self._failure: Optional[Exception] = None

    def run_lanes(self, lanes: Sequence[Sequence[Job]]) -> None:
        """Run each lane's jobs in order, up to ``jobs`` lanes at a time.
        The first failure stops the other lanes (their running jobs are
        terminated) and is raised; so is an interruption of the demo."""
        lanes = [lane for lane in lanes if lane]
        if not lanes:
            return
        workers = min(self.jobs, len(lanes))
        threads = self.threads or stage_threads(len(lanes))
        self._failure = None
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = [
                pool.submit(self._run_lane, lane, threads) for lane in lanes
            ]
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
        if job.in_process:
            returncode = self._run_in_process(job, argv, log_path)
        else:
            returncode = self._run_subprocess(job, argv, threads, log_path)
        seconds = time.monotonic() - start
        with self._lock:
            self.durations[job.name] = seconds
        if returncode != 0:
            tail = log_path.read_text(encoding='utf-8').splitlines()[-25:]
            raise JobError(
                f'job {job.name} failed with exit status '
                f'{returncode} after {seconds:.0f} s:\n  $ {command}'
                '\n  last lines of its output:\n    '
                + '\n    '.join(tail)
                + f'\n  full log: {log_path}'
            )
        self.logger.info(f'[{job.name}] done in {seconds:.1f} s')

    def _run_in_process(
        self, job: Job, argv: Sequence[str], log_path: Path
    ) -> int:
        """``main(argv[1:])`` of the tool ``argv[0]`` (a path relative to
        ``cwd``), run in ``cwd`` as the subprocesses are (the arguments'
        relative paths are relative to it), its output to the log; returns
        its exit status."""
        path = self.cwd / argv[0]
        spec = importlib.util.spec_from_file_location(
            f'hetdpt_demo_{path.stem}', path
        )
        module = importlib.util.module_from_spec(spec)
        output = io.StringIO()
        with (
            self._in_process_lock,
            contextlib.redirect_stdout(output),
            contextlib.redirect_stderr(output),
        ):
            previous_cwd = os.getcwd()
            os.chdir(self.cwd)
            try:
                spec.loader.exec_module(module)
                returncode = module.main(list(argv[1:]))
            except SystemExit as exit_:
                returncode = (
                    exit_.code
                    if isinstance(exit_.code, int)
                    else int(exit_.code is not None)
                )
            except Exception:  # reported like a crashed subprocess
                traceback.print_exc()
                returncode = 1
            finally:
                os.chdir(previous_cwd)
        log_path.write_text(output.getvalue(), encoding='utf-8')
        for line in output.getvalue().splitlines():
            self._show(job, MMENGINE_PREFIX.sub('', line.rstrip()))
        return returncode or 0

    def _run_subprocess(
        self, job: Job, argv: Sequence[str], threads: int, log_path: Path
    ) -> int:
        """``python argv...`` in ``cwd``; returns its exit status."""
        with (
            open(log_path, 'w', encoding='utf-8') as log,
            subprocess.Popen(
                [sys.executable] + argv,
                cwd=self.cwd,
                env=dict(
                    os.environ,
                    PYTHONUNBUFFERED='1',
                    OMP_NUM_THREADS=str(threads),
                    MKL_NUM_THREADS=str(threads),
                ),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                bufsize=1,
            ) as process,
        ):
            with self._lock:
                self._running.add(process)
            try:
                for line in process.stdout:
                    log.write(line)
                    self._show(job, MMENGINE_PREFIX.sub('', line.rstrip()))
            finally:
                with self._lock:
                    self._running.discard(process)
        return process.returncode

    def _show(self, job: Job, text: str) -> None:
        """Print a job's output line if it tells the user something: all of
        it for short tools, else results and decisions, and a training line
        now and then."""
        if job.show_all:
            self.logger.info(f'[{job.name}] {text}')
        elif PROGRESS_LINE.search(text):
            self.logger.info(f'[{job.name}] {NOISY_FIELDS.sub("", text)}')
        elif TRAIN_LINE.search(text) and (
            time.monotonic() - job.last_train_line >= TRAIN_LINE_SECONDS
        ):
            job.last_train_line = time.monotonic()
            eta = re.search(r'eta: (\S+)', text)
            self.logger.info(
                f'[{job.name}] {NOISY_FIELDS.sub("", text)}'
                + (f'  eta {eta.group(1)}' if eta else '')
            )


def default_jobs() -> int:
    """Jobs side by side by default: one more than the cores, at most 3.
    Several of the demo's stages have three similar jobs (the MAP
    schedules, the compared splits): on 2 cores, three at once end in about
    1.5 job lengths where two at a time take 2."""
    return max(1, min(3, (os.cpu_count() or 1) + 1))


def load_average() -> float:
    return os.getloadavg()[0] if hasattr(os, 'getloadavg') else float('nan')


def stage_threads(lanes: int) -> int:
    """Threads per job of a stage of ``lanes`` independent jobs: the cores
    shared out among them, at least 1.  Never the load nor ``--jobs``: the
    number of OpenMP threads changes a run's floating-point reductions, so
    a command gives the same results however busy the machine is and
    however many jobs run at once."""
    return max(1, (os.cpu_count() or 1) // lanes)
