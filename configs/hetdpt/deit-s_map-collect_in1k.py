# MAP data collection for DeiT-S on ImageNet-1k (METHOD.md §2): starting from
# a dense DeiT-S, every `interval` epochs MAPCollectHook removes one more layer
# (chosen by the transfer-entropy score), fine-tunes on a fixed 10% subset of
# the training set and appends an (a, t, accuracy) point to
# <work_dir>/map_points.csv.  One run per schedule:
#
#   python tools/train.py configs/hetdpt/deit-s_map-collect_in1k.py \
#       --work-dir work_dirs/deit-s_map-collect_in1k/interleaved
#   ... --work-dir work_dirs/deit-s_map-collect_in1k/attn \
#       --cfg-options custom_hooks.0.schedule=attn   (and the same for act)
#
# then fit the points with tools/fit_map.py (docs/map.md) or hand them to
# deit-s_prune-10l_in1k.py.
_base_ = './deit-s_dense_in1k.py'

# A dense DeiT-S in this layout with trained heads, e.g. a checkpoint of
# deit-s_dense_in1k.py after a few epochs; the points start from its accuracy.
load_from = 'work_dirs/deit-s_dense_in1k/epoch_10.pth'

model = dict(backbone=dict(gated=True, init_cfg=None))
# A closed gate skips its layer, whose parameters then get no gradient.
model_wrapper_cfg = dict(type='MMDistributedDataParallel',
                         find_unused_parameters=True)

# The fast fine-tune runs on a fixed, seeded 10% of the training set.
train_dataloader = dict(
    sampler=dict(type='SubsetSampler', subset=0.1, subset_seed=0,
                 shuffle=True))
# A constant learning rate, so that later steps get the same recovery as
# earlier ones.
optim_wrapper = dict(optimizer=dict(lr=1e-4))
param_scheduler = [dict(type='ConstantLR', factor=1.0, by_epoch=True)]

interval = 10  # fine-tuning epochs (on the subset) per removed layer
num_steps = 8  # points after the starting one
# The hook evaluates after every step; the loop's own validation never runs.
train_cfg = dict(max_epochs=interval * num_steps, val_begin=1_000_000)
custom_hooks = [
    dict(type='MAPCollectHook',
         schedule='interleaved',  # 'attn' | 'act' | 'interleaved'
         interval=interval,
         max_removed=num_steps,
         calib_images=1024)  # training images for the TE score
]
default_hooks = dict(checkpoint=dict(interval=1, max_keep_ckpts=2))
