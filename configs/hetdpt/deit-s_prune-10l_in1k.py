# HetDPT on DeiT-S, ImageNet-1k, in one run: deit-b_prune-10l_in1k.py (MAP
# split of 10 removed layers, progressive within-type pruning at the end of
# epochs 3, 8, 15, ..., hard distillation from the dense DeiT-S, 400 epochs,
# merged checkpoint) with the DeiT-S model and batch of deit-s_dense_in1k.py.
# MAP splits the budget on the paper's DeiT-B points, as the DeiT-B config;
# DeiT-S's own points (the runs of deit-s_map-collect_in1k.py, concatenated:
# docs/user_guides/map.md) replace them with
#   --cfg-options \
#   custom_hooks.0.map_points=work_dirs/deit-s_map-collect_in1k/map_points.csv
# The authors' two-stage pipeline: deit-s_search-8l_in1k.py,
# deit-s_finetune-8l_in1k.py.
_base_ = [
    '../_base_/models/hetdpt_deit-s_hard-distill.py',
    '../_base_/datasets/imagenet_bs256_swin_224.py',
    '../_base_/schedules/hetdpt_prune-10l_400e.py',
    'mmpretrain::_base_/default_runtime.py',
]

model = dict(backbone=dict(gated=True))
