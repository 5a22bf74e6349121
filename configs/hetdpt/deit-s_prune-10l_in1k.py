# HetDPT on DeiT-S, ImageNet-1k: deit-b_prune-10l_in1k.py (MAP split of 10
# removed layers, progressive within-type pruning at the end of epochs 3, 8,
# 15, ..., hard self-distillation, 400 epochs, merged checkpoint) on DeiT-S,
# with the changes of deit-s_dense_in1k.py.
_base_ = './deit-b_prune-10l_in1k.py'

pretrained_checkpoint = \
    'checkpoints/deit_small_distilled_patch16_224-649709d9.pth'
# The points of deit-s_map-collect_in1k.py (the three schedules' CSV files
# concatenated; the paper gives points for DeiT-B only).
map_points = 'work_dirs/deit-s_map-collect_in1k/map_points.csv'

model = dict(
    backbone=dict(
        arch='deit-small',
        drop_path_rate=0.0,
        init_cfg=dict(checkpoint=pretrained_checkpoint)),
    head=dict(in_channels=384))
train_dataloader = dict(batch_size=256)

custom_hooks = [
    dict(type='HetDPTPruneHook', map_points=map_points, budget=10,
         schedule='progressive'),
    dict(type='MergeCheckpointHook'),
]
