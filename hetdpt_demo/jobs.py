"""The demo's jobs: the project's tools as subprocesses, independent ones
side by side, each logged to its own file; they never outlive the demo."""

import contextlib
import ctypes
import importlib.util
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, List, Sequence


class StageError(Exception):
    """A stage of the demo that failed: the demo exits with status 1."""


#: Short tools without an MMEngine runner run their ``main(argv)`` in the
#: demo's process: a new interpreter's imports cost more than their work.
IN_PROCESS = ('tools/fit_map.py', 'tools/merge_ckpt.py', 'tools/benchmark.py')
PR_SET_PDEATHSIG = 1  # linux/prctl.h
# Looked up before any fork: a child must not load libraries.
PRCTL = ctypes.CDLL(None).prctl if sys.platform == 'linux' else None


def die_with(parent: int) -> Callable[[], None]:
    """A ``preexec_fn`` that has the kernel kill the child when the thread
    that started it ends (the demo killed, even by SIGKILL; Linux only),
    and ends the child at once if its parent is already gone."""

    def preexec() -> None:
        if PRCTL is not None:
            PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            os._exit(1)

    return preexec


def default_jobs() -> int:
    """Jobs side by side: one more than the cores, at most 3 (three
    similar jobs on 2 cores end in about 1.5 job lengths)."""
    return max(1, min(3, (os.cpu_count() or 1) + 1))


class Jobs:
    """Runs lanes of ``(name, argv)`` jobs (``python argv...`` from
    ``repo``), each lane in order, up to ``jobs`` lanes at a time; the
    first failure stops the others and is raised."""

    def __init__(self, repo: Path, log_dir: Path, threads, jobs: int, log):
        self.repo, self.log_dir, self.log = repo, log_dir, log
        self.threads, self.jobs = threads, jobs
        self.commands: List[str] = []
        self._running: set = set()
        self._lock = threading.Lock()
        self._in_process = threading.Lock()  # one owns stdout and the cwd
        self._failed = False

    def run(self, lanes: Sequence) -> None:
        """``lanes``: lists of jobs, or single jobs, each a lane."""
        lanes = [[x] if isinstance(x, tuple) else x for x in lanes if x]
        # The cores shared among the stage's lanes, whatever the load and
        # --jobs: a command's threads (its float reductions) never change.
        threads = self.threads or max(1, (os.cpu_count() or 1) // len(lanes))
        self._failed = False
        with ThreadPoolExecutor(min(self.jobs, len(lanes)) or 1) as pool:
            futures = [
                pool.submit(self._lane, lane, threads) for lane in lanes
            ]
            try:
                errors = [future.exception() for future in futures]
            except BaseException:  # Ctrl-C: stop the running jobs
                self._stop()
                raise
        error = next((error for error in errors if error), None)
        if error is not None:
            raise error

    def _lane(self, lane: Sequence, threads: int) -> None:
        for name, argv in lane:
            if self._failed:
                return
            try:
                self._job(name, list(argv), threads)
            except BaseException:
                self._failed = True
                self._stop()
                raise

    def _stop(self) -> None:
        with self._lock:
            for process in self._running:
                process.terminate()

    def _job(self, name: str, argv: List[str], threads: int) -> None:
        command = shlex.join([f'OMP_NUM_THREADS={threads}', 'python'] + argv)
        log_path = self.log_dir / f'{name}.log'
        with self._lock:
            self.commands.append(command)
        self.log(f'[{name}] $ {command}')
        start = time.monotonic()
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        env['MKL_NUM_THREADS'] = str(threads)
        with open(log_path, 'w', encoding='utf-8') as log:
            code = (
                self._main(argv, log)
                if argv[0] in IN_PROCESS
                else self._subprocess(argv, env, log)
            )
        seconds = time.monotonic() - start
        if code != 0:
            tail = log_path.read_text(encoding='utf-8').splitlines()[-15:]
            raise StageError(
                f'job {name} failed (exit status {code}) after {seconds:.0f}'
                f' s: $ {command}\n    '
                + '\n    '.join(tail)
                + f'\n  full log: {log_path}'
            )
        self.log(f'[{name}] done in {seconds:.1f} s')

    def _subprocess(self, argv: List[str], env, log) -> int:
        process = subprocess.Popen(
            [sys.executable] + argv,
            cwd=self.repo,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with(os.getpid()),
        )
        with self._lock:
            self._running.add(process)
        try:
            return process.wait()
        finally:
            with self._lock:
                self._running.discard(process)

    def _main(self, argv: List[str], log) -> int:
        """The tool's ``main(argv[1:])``, run from the repository root as
        a subprocess would be, its output to ``log``."""
        spec = importlib.util.spec_from_file_location(
            f'demo_{Path(argv[0]).stem}', self.repo / argv[0]
        )
        module = importlib.util.module_from_spec(spec)
        with (
            self._in_process,
            contextlib.redirect_stdout(log),
            contextlib.redirect_stderr(log),
            contextlib.chdir(self.repo),
        ):
            spec.loader.exec_module(module)
            return module.main(argv[1:])
