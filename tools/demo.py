#!/usr/bin/env python
"""HetDPT end to end on the embedded CPU demo, in one command.

    python tools/demo.py [--quick] [--work-dir work_dirs/demo]
        [--data-root data/demo] [--budget K] [--seeds S [S ...]]
        [--jobs N] [--threads N] [--resume]

Dense training, MAP points, MAP fit, pruning, merging, DETR and UperNet
transfer, benchmark, token merging and a report, each stage running the
project's own tools; the stages and their outputs are described in
:mod:`hetdpt_demo` and docs/user_guides/demo.md.  ``--quick`` is the
CI variant (minutes; its accuracies mean nothing).

Exit status: 0 done, 1 a stage failed, 2 bad input (a work dir or saved
state that cannot be used; ``error: ...``, nothing run).
"""

import argparse
import shlex
import sys
from pathlib import Path
from typing import Optional, Sequence

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a clone without installing

from hetdpt_demo import (  # noqa: E402
    DEFAULT_DATA_ROOT,
    FULL,
    QUICK,
    Demo,
    DemoError,
    DemoInputError,
    DemoOptions,
)
from hetdpt_demo.jobs import JobError, default_jobs  # noqa: E402
from hetdpt_mm.cli import run_reporting_errors  # noqa: E402


def parse_args(argv: Optional[Sequence[str]] = None) -> DemoOptions:
    parser = argparse.ArgumentParser(
        description='HetDPT end to end on the embedded CPU demo: dense '
        'training, MAP, pruning, merging, DETR, UperNet, benchmark, token '
        'merging, report.'
    )
    parser.add_argument(
        '--quick',
        action='store_true',
        help='the CI variant: tiny subsets and schedules',
    )
    parser.add_argument(
        '--work-dir',
        type=Path,
        default=Path('work_dirs/demo'),
        help='all outputs go here (default work_dirs/demo)',
    )
    parser.add_argument(
        '--data-root',
        type=Path,
        default=Path(DEFAULT_DATA_ROOT),
        help='demo datasets, made here if missing (default data/demo)',
    )
    parser.add_argument(
        '--budget',
        type=int,
        help='layers to remove in total, split by MAP '
        f'(default {FULL.budget}, --quick {QUICK.budget})',
    )
    parser.add_argument(
        '--seeds',
        type=int,
        nargs='+',
        help='seeds of the compared splits, one prune run of each split '
        f'per seed (default {" ".join(map(str, FULL.seeds))}, --quick '
        f'{" ".join(map(str, QUICK.seeds))})',
    )
    parser.add_argument(
        '--jobs',
        type=int,
        default=default_jobs(),
        help='independent jobs run side by side (default: '
        'one more than the cores, at most 3)',
    )
    parser.add_argument(
        '--threads',
        type=int,
        help='torch / OpenMP threads per job (default: the '
        'cores shared out among the jobs of a stage, at least 1, '
        'whatever the load and --jobs; benchmarks use 1)',
    )
    parser.add_argument(
        '--resume',
        action='store_true',
        help='continue the earlier run in --work-dir, '
        'skipping its finished stages',
    )
    args = parser.parse_args(argv)
    for name in ('jobs', 'threads', 'budget'):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f'--{name} must be >= 1')
    if args.seeds is not None and (
        len(set(args.seeds)) != len(args.seeds) or min(args.seeds) < 0
    ):
        parser.error('--seeds must be distinct integers >= 0')
    return DemoOptions(
        repo=REPO,
        work_dir=args.work_dir.resolve(),
        data_root=args.data_root.resolve(),
        quick=args.quick,
        budget=args.budget,
        seeds=None if args.seeds is None else tuple(args.seeds),
        jobs=args.jobs,
        threads=args.threads,
        resume=args.resume,
        command=shlex.join(
            ['python', 'tools/demo.py']
            + list(sys.argv[1:] if argv is None else argv)
        ),
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    # SIGTERM ends it through the wrapper, so the running jobs stop too.
    return run_reporting_errors(
        lambda: Demo(parse_args(argv)).run(),
        {DemoInputError: 2, DemoError: 1, JobError: 1},
    )


if __name__ == '__main__':
    sys.exit(main())
