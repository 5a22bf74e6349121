# HetDPT on the demo digits: the small ViT of ./vit-demo_digits.py with gates
# (HetDPTViT(gated=True)); HetDPTPruneHook splits a budget of 5 removed layers
# between attention and GELU layers with MAP and closes them one by one
# (progressive schedule), each time the open layer of that type with the
# lowest learned score; the rest of the run fine-tunes the pruned network.
# MergeCheckpointHook writes <work_dir>/vit-demo_digits_prune_merged.pth.
#
#   python tools/make_demo_data.py data/demo
#   python tools/train.py configs/demo/vit-demo_digits_prune.py
#
# The hooks, the paper's DeiT-B MAP points (retained ratios, so they apply to
# any depth) and DDP's settings are HetDPT's pruning base
# (../_base_/schedules/hetdpt_prune-10l.py); use points collected on your own
# model instead (configs/demo/vit-demo_digits_map.py,
# docs/user_guides/map.md). See docs/user_guides/pruning.md.
_base_ = ['./vit-demo_digits.py', '../_base_/schedules/hetdpt_prune-10l.py']

model = dict(backbone=dict(gated=True))

budget = 5  # of the 12 layers
custom_hooks = [
    dict(_base_.custom_hooks[0], budget=budget, stages=[2, 1, 1, 1, 1]),
    dict(type='MergeCheckpointHook'),
]

train_cfg = dict(max_epochs=12, val_interval=3)
default_hooks = dict(checkpoint=dict(interval=1, max_keep_ckpts=2))
