# HetDPT on DeiT-S, ImageNet-1k: deit-b_prune-10l_in1k.py (MAP split of 10
# removed layers, progressive within-type pruning at the end of epochs 3, 8,
# 15, ..., hard self-distillation, 400 epochs, merged checkpoint) on DeiT-S.
_base_ = './deit-s_dense_in1k.py'
custom_imports = dict(imports=['hetdpt_mm', 'hetdpt_mm.models.distill'],
                      allow_failed_imports=False)

# The points of deit-s_map-collect_in1k.py (the three schedules' CSV files
# concatenated; the paper gives points for DeiT-B only).
map_points = 'work_dirs/deit-s_map-collect_in1k/map_points.csv'
budget = 10

model = dict(
    type='HetDPTDistillClassifier',
    distill=dict(mode='hard', alpha=0.5),
    backbone=dict(gated=True))
model_wrapper_cfg = dict(type='MMDistributedDataParallel',
                         find_unused_parameters=True)

custom_hooks = [
    dict(type='HetDPTPruneHook', map_points=map_points, budget=budget,
         schedule='progressive'),
    dict(type='MergeCheckpointHook'),
]
