# MAP data collection for DeiT-B on ImageNet-1k (docs/method.md §2): starting
# from
# a dense DeiT-B, every `interval` epochs MAPCollectHook removes one more layer
# (chosen by the transfer-entropy score), fine-tunes on a fixed 10% subset of
# the training set and appends an (a, t, accuracy) point to
# <work_dir>/map_points.csv.  One run per schedule:
#
#   python tools/train.py configs/hetdpt/deit-b_map-collect_in1k.py \
#       --work-dir work_dirs/deit-b_map-collect_in1k/interleaved
#   ... --work-dir work_dirs/deit-b_map-collect_in1k/attn \
#       --cfg-options custom_hooks.0.schedule=attn   (and the same for act)
#
# then fit the points with tools/fit_map.py (docs/user_guides/map.md) or hand
# them to deit-b_prune-10l_in1k.py.
_base_ = [
    '../_base_/models/hetdpt_deit-b.py',
    'mmpretrain::_base_/datasets/imagenet_bs64_swin_224.py',
    '../_base_/schedules/hetdpt_map-collect_80e.py',
    'mmpretrain::_base_/default_runtime.py',
]

# A dense DeiT-B in this layout with trained heads, e.g. a checkpoint of
# deit-b_dense_in1k.py after a few epochs; the points start from its accuracy.
load_from = 'work_dirs/deit-b_dense_in1k/epoch_10.pth'

model = dict(backbone=dict(gated=True, init_cfg=None))
# The fast fine-tune runs on a fixed, seeded 10% of the training set.
train_dataloader = dict(
    sampler=dict(type='SubsetSampler', subset=0.1, subset_seed=0, shuffle=True)
)
default_hooks = dict(checkpoint=dict(interval=1, max_keep_ckpts=2))
