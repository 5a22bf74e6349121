"""Train any mmpretrain / mmdet / mmseg config (HetDPT modules registered).

    python tools/train.py CONFIG [--work-dir DIR] [--resume [CKPT]] [--amp]
        [--cfg-options k=v ...] [--launcher pytorch]
"""
import argparse
import os
import os.path as osp

from mmengine.config import Config, DictAction

from hetdpt_mm.hooks.spec_meta_hook import ensure_meta_hook
from hetdpt_mm.runner import build_runner, trust_checkpoints


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Train a model')
    parser.add_argument('config', help='train config file path')
    parser.add_argument('--work-dir', help='the dir to save logs and models')
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
    parser.add_argument(
        '--trust-checkpoint', action='store_true',
        help='load checkpoints with full pickle (only for files you trust)')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config settings, key=value')
    parser.add_argument('--launcher', default='none',
                        choices=['none', 'pytorch', 'slurm', 'mpi'])
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args(argv)
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.trust_checkpoint:
        trust_checkpoints()
    cfg = Config.fromfile(args.config)
    cfg.launcher = args.launcher
    if args.cfg_options is not None:
        cfg.merge_from_dict(args.cfg_options)
    if args.work_dir is not None:
        cfg.work_dir = args.work_dir
    elif cfg.get('work_dir') is None:
        cfg.work_dir = osp.join('./work_dirs',
                                osp.splitext(osp.basename(args.config))[0])
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
    if args.resume == 'auto':
        cfg.resume = True
        cfg.load_from = None
    elif args.resume is not None:
        cfg.resume = True
        cfg.load_from = args.resume
    runner = build_runner(cfg)
    ensure_meta_hook(runner)  # checkpoints of a HetDPTViT carry its spec
    runner.train()


if __name__ == '__main__':
    main()
