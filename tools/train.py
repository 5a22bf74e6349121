"""Train any mmpretrain / mmdet / mmseg config (HetDPT modules registered).

    python tools/train.py CONFIG [--work-dir DIR] [--resume [CKPT] |
        --overwrite] [--amp] [--cfg-options k=v ...] [--launcher pytorch]

Bad input (a missing or broken config, a missing pretrained checkpoint, a
work dir where the run would write over an input, a work dir another run is
training in or whose earlier run's checkpoints a fresh run would replace, a
checkpoint that cannot be resumed) prints ``error: <message>`` and exits
with status 2.
"""

import sys

from hetdpt_mm.apis.train import run_train
from hetdpt_mm.cli import ArgumentParser, run_reporting_errors
from hetdpt_mm.runner import add_runner_arguments


def parse_args(argv=None):
    parser = ArgumentParser(description='Train a model')
    parser.add_argument('config', help='train config file path')
    parser.add_argument(
        '--amp',
        action='store_true',
        help='enable automatic mixed precision training',
    )
    parser.add_argument(
        '--auto-scale-lr',
        action='store_true',
        help='scale the learning rate by the batch size',
    )
    start = parser.add_mutually_exclusive_group()
    start.add_argument(
        '--resume',
        nargs='?',
        type=str,
        const='auto',
        help='resume from this checkpoint, or without a value from the '
        'latest checkpoint in the work directory',
    )
    start.add_argument(
        '--overwrite',
        action='store_true',
        help='start over in a work dir that holds the checkpoints of an '
        'earlier run (they are removed)',
    )
    parser.add_argument(
        '--no-validate',
        action='store_true',
        help='skip validation during training',
    )
    parser.add_argument(
        '--validate-first',
        action='store_true',
        help='also validate the starting model, before the '
        'first training step (ValidateFirstHook)',
    )
    add_runner_arguments(parser)
    return parser.parse_args(argv)


def main(argv=None) -> int:
    return run_reporting_errors(lambda: run_train(parse_args(argv)))


if __name__ == '__main__':
    sys.exit(main())
