# HetDPT on DeiT-B, ImageNet-1k (METHOD.md §2-4): remove 10 layers, split
# between attention and GELU layers by MAP, chosen within each type by the
# learned gate scores, progressively (one removal at the end of epochs 3, 8,
# 15, 24, 35, 48, 63, 80, ...: stage lengths 3, 5, 7, ...), then fine-tune
# the pruned network with hard self-distillation until epoch 400.
# MergeCheckpointHook writes <work_dir>/deit-b_prune-10l_in1k_merged.pth, the
# deployable backbone + heads that the DETR / UperNet configs load.
#
#   python tools/train.py configs/hetdpt/deit-b_prune-10l_in1k.py
#   bash tools/dist_train.sh configs/hetdpt/deit-b_prune-10l_in1k.py 8
_base_ = './deit-b_dense_in1k.py'
custom_imports = dict(imports=['hetdpt_mm', 'hetdpt_mm.models.distill'],
                      allow_failed_imports=False)

# MAP points: the paper's DeiT-B points (their fit allocates 5 attention + 5
# GELU layers for a budget of 10); use your own from
# deit-b_map-collect_in1k.py.
map_points = 'tests/data/map_points_paper.csv'
budget = 10

model = dict(
    # Hard distillation (DeiT) from a frozen copy of the model taken just
    # before the first removal: no extra teacher to download or train.
    type='HetDPTDistillClassifier',
    distill=dict(mode='hard', alpha=0.5),
    backbone=dict(gated=True))
# A closed gate skips its layer, whose parameters then get no gradient.
model_wrapper_cfg = dict(type='MMDistributedDataParallel',
                         find_unused_parameters=True)

custom_hooks = [
    dict(type='HetDPTPruneHook', map_points=map_points, budget=budget,
         schedule='progressive'),  # stages=None: the authors' 3, 5, 7, ...
    dict(type='MergeCheckpointHook'),
]
