"""Train any mmpretrain / mmdet / mmseg config (HetDPT modules registered).

    python tools/train.py CONFIG [--work-dir DIR] [--resume [CKPT]] [--amp]
        [--cfg-options k=v ...] [--launcher pytorch]
"""
import argparse

from hetdpt_mm.runner import (add_runner_arguments, apply_resume,
                              build_runner, load_config, release_distributed)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Train a model')
    parser.add_argument('config', help='train config file path')
    parser.add_argument('--amp', action='store_true',
                        help='enable automatic mixed precision training')
    parser.add_argument('--auto-scale-lr', action='store_true',
                        help='scale the learning rate by the batch size')
    parser.add_argument(
        '--resume', nargs='?', type=str, const='auto',
        help='resume from this checkpoint, or without a value from the '
        'latest checkpoint in the work directory')
    parser.add_argument('--no-validate', action='store_true',
                        help='skip validation during training')
    add_runner_arguments(parser)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    cfg = load_config(args)
    if args.amp:
        cfg.optim_wrapper.type = 'AmpOptimWrapper'
        cfg.optim_wrapper.setdefault('loss_scale', 'dynamic')
    if args.auto_scale_lr:
        if 'base_batch_size' not in cfg.get('auto_scale_lr', {}):
            raise SystemExit('error: the config has no '
                             'auto_scale_lr.base_batch_size')
        cfg.auto_scale_lr.enable = True
    if args.no_validate:
        cfg.val_cfg = cfg.val_dataloader = cfg.val_evaluator = None
    apply_resume(cfg, args.resume)
    runner = build_runner(cfg)
    try:
        runner.train()
    finally:
        release_distributed()


if __name__ == '__main__':
    main()
