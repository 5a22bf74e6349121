# HetDPT pruning (docs/method.md §2-4) on any schedule: remove 10 layers, split
# between attention and GELU layers by MAP, chosen within each type by the
# learned gate scores, progressively (one removal at the end of epochs 3, 8,
# 15, 24, 35, 48, 63, 80, ...: stage lengths 3, 5, 7, ...), then fine-tune the
# pruned network until the end.  MergeCheckpointHook writes
# <work_dir>/<config name>_merged.pth, the deployable backbone + heads that
# the detection and segmentation configs load.
_base_ = '../gated_ddp.py'

# MAP points: the paper's DeiT-B points (their fit allocates 5 attention + 5
# GELU layers for a budget of 10); use your own from a MAP collection run.
map_points = '{{ fileDirname }}/../../../tests/data/map_points_paper.csv'
budget = 10

custom_hooks = [
    dict(
        type='HetDPTPruneHook',
        map_points=map_points,
        budget=budget,
        schedule='progressive',
    ),  # stages=None: the authors' 3, 5, 7, ...
    dict(type='MergeCheckpointHook'),
]
