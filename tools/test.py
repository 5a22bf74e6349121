"""Test (evaluate) a checkpoint of any mmpretrain / mmdet / mmseg config.

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--out FILE.pkl]
        [--show-dir DIR] [--out-metrics FILE.json] [--tta] [--non-strict]
        [--cfg-options k=v ...] [--launcher pytorch]

The checkpoint is loaded strictly: weights that do not fit the model are an
error unless ``--non-strict``.  ``--out`` is a pickle of raw predictions
(mmdet, mmpretrain) or, for segmentation configs, a directory of predicted
masks (mmseg's ``--out``).  Every option is checked before a model is built;
bad input prints ``error: <message>`` and exits with status 2.
"""

import sys

from hetdpt_mm.apis.evaluate import run_test
from hetdpt_mm.cli import ArgumentParser, run_reporting_errors
from hetdpt_mm.runner import add_runner_arguments


def parse_args(argv=None):
    parser = ArgumentParser(description='Test a model')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument(
        '--out',
        help='dump raw predictions to this pickle '
        '(segmentation: a directory of predicted masks)',
    )
    parser.add_argument(
        '--out-metrics', help='write the evaluation metrics to this JSON'
    )
    parser.add_argument(
        '--show', action='store_true', help='show prediction results'
    )
    parser.add_argument(
        '--show-dir', help='directory where painted images are saved'
    )
    parser.add_argument(
        '--wait-time', type=float, default=2, help='the interval of show (s)'
    )
    parser.add_argument(
        '--tta',
        action='store_true',
        help="test-time augmentation (the config's "
        'tta_model and tta_pipeline)',
    )
    parser.add_argument(
        '--non-strict',
        action='store_true',
        help="test even if the checkpoint's keys do not "
        'fit the model (missing weights stay random)',
    )
    add_runner_arguments(parser)
    return parser.parse_args(argv)


def main(argv=None) -> int:
    return run_reporting_errors(lambda: run_test(parse_args(argv)))


if __name__ == '__main__':
    sys.exit(main())
