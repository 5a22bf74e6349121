"""Generate the demo datasets (classification, COCO, ADE20K layouts).

    python tools/make_demo_data.py data/demo [--seed 0]

Existing datasets made with the same settings are kept.  Errors print
``error: <message>`` and exit with status 2.
"""

import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a clone without installing

from hetdpt_demo.data import make_all  # noqa: E402
from hetdpt_mm.cli import ArgumentParser, run_reporting_errors  # noqa: E402


def make(root: str, seed: int) -> None:
    start = time.perf_counter()
    for name, path in make_all(root, seed).items():
        print(f'{name}: {path}')
    print(f'done in {time.perf_counter() - start:.1f} s')


def main(argv=None):
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('root', nargs='?', default='data/demo')
    parser.add_argument('--seed', type=int, default=0)

    def run():
        args = parser.parse_args(argv)
        make(args.root, args.seed)

    return run_reporting_errors(run)


if __name__ == '__main__':
    sys.exit(main())
