# MAP data collection for Swin-B on ImageNet-1k (docs/method.md §2,
# docs/user_guides/map.md): Swin's own (a, t, accuracy) points, in place of the
# paper's DeiT-B points that swin-b_prune-17l_in1k.py reads until these exist.
# From the official dense Swin-B classifier (backbone and head, as the prune
# config), every `interval` epochs MAPCollectHook removes one more layer of the
# 24 blocks' 48 (chosen by the transfer-entropy score, which reads the normed
# last stage averaged over its positions: HetDPTSwin.class_feature), fine-tunes
# on a fixed 10% of the training set and appends a point to
# <work_dir>/map_points.csv.  One run per schedule:
#
#   bash tools/dist_train.sh configs/hetdpt/swin-b_map-collect_in1k.py 16 \
#       --work-dir work_dirs/swin-b_map-collect_in1k/interleaved
#   ... --work-dir work_dirs/swin-b_map-collect_in1k/attn \
#       --cfg-options custom_hooks.0.schedule=attn   (and the same for act)
#
# then fit them (tools/fit_map.py) and give the prune config
# --cfg-options custom_hooks.0.map_points=<the merged csv>.
#
# The recipe is the DeiT one's (deit-b_map-collect_in1k.py): a constant
# learning rate of 1e-4, so that later steps recover as much as earlier ones,
# and 10 epochs of the subset per step.  Steps: as many as the budget (17),
# so that the points of every schedule reach the depth MAP allocates at and
# its split lies inside them (8 attention + 9 GELU on the paper's points).
_base_ = './swin-b_prune-17l_in1k.py'

interval = 10  # fine-tuning epochs per removed layer
num_steps = 17  # points after the dense one: the prune config's budget

optim_wrapper = dict(optimizer=dict(lr=1e-4))
param_scheduler = [dict(type='ConstantLR', factor=1.0, by_epoch=True)]
# The hook evaluates after every step; the loop's own validation never runs.
train_cfg = dict(max_epochs=interval * num_steps, val_begin=1_000_000)
train_dataloader = dict(
    sampler=dict(type='SubsetSampler', subset=0.1, subset_seed=0, shuffle=True)
)
default_hooks = dict(checkpoint=dict(interval=1, max_keep_ckpts=2))
# The hook of ../_base_/schedules/hetdpt_map-collect_80e.py (its options
# explained there).
custom_hooks = [
    dict(
        type='MAPCollectHook',
        schedule='interleaved',
        interval=interval,
        max_removed=num_steps,
        calib_images=1024,
    )
]
