# HetDPT on DeiT-S, ImageNet-1k, in one run: deit-b_prune-10l_in1k.py (MAP
# split of 10 removed layers, progressive within-type pruning at the end of
# epochs 3, 8, 15, ..., hard distillation from the dense DeiT-S, 400 epochs,
# merged checkpoint) with the DeiT-S model and batch of deit-s_dense_in1k.py
# and DeiT-S's own MAP points.  The authors' two-stage pipeline:
# deit-s_search-8l_in1k.py, deit-s_finetune-8l_in1k.py.
_base_ = [
    '../_base_/models/hetdpt_deit-s.py',
    '../_base_/datasets/imagenet_bs256_swin_224.py',
    '../_base_/schedules/hetdpt_prune-10l_400e.py',
    'mmpretrain::_base_/default_runtime.py',
]
custom_imports = dict(imports=['hetdpt_mm', 'hetdpt_mm.models.distill'],
                      allow_failed_imports=False)

# The points of deit-s_map-collect_in1k.py (the three schedules' CSV files
# concatenated; the paper gives points for DeiT-B only).
map_points = 'work_dirs/deit-s_map-collect_in1k/map_points.csv'

# https://dl.fbaipublicfiles.com/deit/deit_small_patch16_224-cd65a155.pth
teacher_checkpoint = 'checkpoints/deit_small_patch16_224-cd65a155.pth'

model = dict(
    # Hard distillation from the dense DeiT-S, as deit-b_prune-10l_in1k.py
    # (snapshot teacher instead: model.teacher=None
    # model.teacher_checkpoint=None).
    type='HetDPTDistillClassifier',
    distill=dict(mode='hard', alpha=0.5),
    backbone=dict(gated=True),
    teacher=dict(
        type='ImageClassifier',
        backbone=dict(type='HetDPTViT', arch='deit-small', img_size=224,
                      patch_size=16),
        head=dict(type='VisionTransformerClsHead', num_classes=1000,
                  in_channels=384)),
    teacher_checkpoint=teacher_checkpoint)

custom_hooks = [
    dict(type='HetDPTPruneHook', map_points=map_points, budget=10,
         schedule='progressive'),
    dict(type='MergeCheckpointHook'),
]
