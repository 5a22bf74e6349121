#!/usr/bin/env python
"""HetDPT end to end on the embedded CPU demo, in one command.

    python tools/demo.py [--quick] [--all-splits] [--work-dir DIR]
        [--data-root DIR] [--budget K] [--seeds S [S ...]] [--jobs N]
        [--threads N] [--resume]

Dense training, MAP points and fit, each compared split of the budget
pruned over several seeds, merging, DETR and UperNet, benchmarks and the
paper's Fig. 8 with ToMe and GTP-ViT: the project's tools on the configs
in configs/demo/ (:mod:`hetdpt_demo`, docs/user_guides/demo.md), then
``report.md`` and ``summary.json``.  ``--quick``: the CI variant.

Exit status: 0 done, 1 a stage failed, 2 bad input (``error: ...``, found
before anything is written or deleted).
"""

import shlex
import sys
from pathlib import Path
from typing import Optional, Sequence

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a clone without installing

from hetdpt_demo import settings  # noqa: E402
from hetdpt_demo.jobs import StageError, default_jobs  # noqa: E402
from hetdpt_demo.stages import Demo  # noqa: E402
from hetdpt_mm import cli  # noqa: E402
from hetdpt_mm.errors import UsageError  # noqa: E402


def parse_args(argv: Sequence[str]) -> settings.DemoOptions:
    full, quick = settings.FULL, settings.QUICK
    seeds = ' '.join(map(str, full.seeds))
    all_seeds = ' '.join(map(str, settings.ALL_SPLITS_SEEDS))
    parser = cli.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add('--quick', action='store_true', help='tiny subsets and schedules')
    add(
        '--all-splits',
        action='store_true',
        help="prune every split of the budget, not only MAP's, each type "
        f'alone and none; seeds {all_seeds} '
        'unless --seeds',
    )
    add('--work-dir', type=Path, default=Path('work_dirs/demo'))
    add('--data-root', type=Path, default=Path(settings.DEFAULT_DATA_ROOT))
    add(
        '--budget',
        type=int,
        help=f'layers removed (default {full.budget}, --quick {quick.budget})',
    )
    add('--seeds', type=int, nargs='+', help=f'default {seeds}, --quick 0')
    add(
        '--jobs',
        type=int,
        default=default_jobs(),
        help='jobs side by side (default: the cores + 1, at most 3)',
    )
    add(
        '--threads',
        type=int,
        help='threads per job (default: the cores shared among the jobs of '
        'a stage; benchmarks 1; on a busy machine give 1)',
    )
    add(
        '--resume',
        action='store_true',
        help='continue the run in --work-dir; a changed --budget, --seeds '
        'or --all-splits runs the stages that read it again',
    )
    args = parser.parse_args(argv)
    for name in ('jobs', 'threads', 'budget'):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise UsageError(f'--{name} must be at least 1')
    if args.seeds and (
        len(set(args.seeds)) < len(args.seeds) or min(args.seeds) < 0
    ):
        raise UsageError('--seeds must be distinct integers >= 0')
    return settings.DemoOptions(
        repo=REPO,
        work_dir=args.work_dir.resolve(),
        data_root=args.data_root.resolve(),
        quick=args.quick,
        budget=args.budget,
        seeds=None if args.seeds is None else tuple(args.seeds),
        all_splits=args.all_splits,
        jobs=args.jobs,
        threads=args.threads,
        resume=args.resume,
        command=shlex.join(['python', 'tools/demo.py', *argv]),
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    run = lambda: Demo(parse_args(argv)).run()  # noqa: E731
    return cli.run_reporting_errors(run, {StageError: 1})


if __name__ == '__main__':
    sys.exit(main())
