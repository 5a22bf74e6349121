"""Generate the demo datasets (classification, COCO, ADE20K layouts).

    python tools/make_demo_data.py data/demo [--seed 0]

Existing datasets made with the same settings are kept.
"""
import argparse
import sys
import time

from hetdpt_mm.datasets import make_all


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('root', nargs='?', default='data/demo')
    parser.add_argument('--seed', type=int, default=0)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    try:
        paths = make_all(args.root, args.seed)
    except FileExistsError as error:
        print(f'error: {error}', file=sys.stderr)
        return 2
    for name, path in paths.items():
        print(f'{name}: {path}')
    print(f'done in {time.perf_counter() - start:.1f} s')
    return 0


if __name__ == '__main__':
    sys.exit(main())
