"""Train any mmpretrain / mmdet / mmseg config (HetDPT modules registered).

    python tools/train.py CONFIG [--work-dir DIR] [--resume [CKPT] |
        --overwrite] [--amp] [--cfg-options k=v ...] [--launcher pytorch]

Bad input (a missing or broken config, a missing pretrained checkpoint, a
work dir where the run would write over an input, a work dir another run is
training in or whose earlier run's checkpoints a fresh run would replace, a
checkpoint that cannot be resumed) prints ``error: <message>`` and exits
with status 2.
"""
import argparse
import sys

from hetdpt_mm.cli import ArgumentParser, UsageError, run_reporting_errors
from hetdpt_mm.runner import (
    RUN_ERRORS,
    add_runner_arguments,
    apply_resume,
    build_runner,
    check_pretrained_exist,
    check_work_dir,
    claim_work_dir,
    load_config,
    release_distributed,
)


def parse_args(argv=None):
    parser = ArgumentParser(description='Train a model')
    parser.add_argument('config', help='train config file path')
    parser.add_argument('--amp', action='store_true',
                        help='enable automatic mixed precision training')
    parser.add_argument('--auto-scale-lr', action='store_true',
                        help='scale the learning rate by the batch size')
    start = parser.add_mutually_exclusive_group()
    start.add_argument(
        '--resume', nargs='?', type=str, const='auto',
        help='resume from this checkpoint, or without a value from the '
        'latest checkpoint in the work directory')
    start.add_argument(
        '--overwrite', action='store_true',
        help='start over in a work dir that holds the checkpoints of an '
        'earlier run (they are removed)')
    parser.add_argument('--no-validate', action='store_true',
                        help='skip validation during training')
    parser.add_argument('--validate-first', action='store_true',
                        help='also validate the starting model, before the '
                        'first training step (ValidateFirstHook)')
    add_runner_arguments(parser)
    return parser.parse_args(argv)


def train(args: argparse.Namespace) -> None:
    cfg = load_config(args)
    if args.amp:
        cfg.optim_wrapper.type = 'AmpOptimWrapper'
        cfg.optim_wrapper.setdefault('loss_scale', 'dynamic')
    if args.auto_scale_lr:
        if 'base_batch_size' not in cfg.get('auto_scale_lr', {}):
            raise UsageError('the config has no auto_scale_lr.base_batch_size')
        cfg.auto_scale_lr.enable = True
    if args.no_validate:
        if args.validate_first:
            raise UsageError('--validate-first needs validation: drop '
                             '--no-validate')
        cfg.val_cfg = cfg.val_dataloader = cfg.val_evaluator = None
    if args.validate_first:
        cfg.custom_hooks = list(cfg.get('custom_hooks') or []) + [
            dict(type='ValidateFirstHook')]
    apply_resume(cfg, args.resume)
    check_work_dir(cfg, args.config,
                   resume_from=cfg.load_from if cfg.get('resume') else None)
    if not cfg.get('load_from') and not cfg.get('resume'):
        check_pretrained_exist(cfg)  # loaded weights replace init_cfg's
    try:
        with claim_work_dir(cfg, resume=args.resume is not None,
                            overwrite=args.overwrite):
            build_runner(cfg).train()
    finally:
        release_distributed()  # after the runner is gone: see its docstring


def main(argv=None) -> int:
    return run_reporting_errors(lambda: train(parse_args(argv)), RUN_ERRORS)


if __name__ == '__main__':
    sys.exit(main())
