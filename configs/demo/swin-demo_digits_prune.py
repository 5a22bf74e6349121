# HetDPT on the demo digits with a small Swin (docs/user_guides/swin.md): the
# recipe of ./vit-demo_digits_prune.py (HetDPTPruneHook with MAP's split of the
# budget, progressive removals, MergeCheckpointHook) on the gated form of
# ./swin-demo_digits.py.  Writes
# <work_dir>/swin-demo_digits_prune_merged.pth, the backbone
# ./mask-rcnn_hetdpt-swin_demo.py and ./upernet_hetdpt-swin_demo.py start
# from.  A starting point for the CPU demo, not tuned.
#
#   python tools/make_demo_data.py data/demo
#   python tools/train.py configs/demo/swin-demo_digits_prune.py
_base_ = ['./swin-demo_digits.py', '../_base_/schedules/hetdpt_prune-10l.py']

model = dict(backbone=dict(gated=True))

budget = 3  # of the 16 layers (the ViT demo: 5 of 12)
custom_hooks = [
    dict(_base_.custom_hooks[0], budget=budget, stages=[2, 1, 1]),
    dict(type='MergeCheckpointHook'),
]

train_cfg = dict(max_epochs=8, val_interval=4)
default_hooks = dict(checkpoint=dict(interval=1, max_keep_ckpts=2))
