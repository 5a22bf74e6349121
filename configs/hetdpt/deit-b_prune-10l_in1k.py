# HetDPT on DeiT-B, ImageNet-1k (METHOD.md §2-4): remove 10 layers, split
# between attention and GELU layers by the paper's MAP points, progressively,
# then fine-tune the pruned network with hard self-distillation until epoch
# 400 (../_base_/schedules/hetdpt_prune-10l_400e.py).  MergeCheckpointHook
# writes <work_dir>/deit-b_prune-10l_in1k_merged.pth.
#
#   python tools/train.py configs/hetdpt/deit-b_prune-10l_in1k.py
#   bash tools/dist_train.sh configs/hetdpt/deit-b_prune-10l_in1k.py 8
_base_ = [
    '../_base_/models/hetdpt_deit-b.py',
    'mmpretrain::_base_/datasets/imagenet_bs64_swin_224.py',
    '../_base_/schedules/hetdpt_prune-10l_400e.py',
    'mmpretrain::_base_/default_runtime.py',
]
custom_imports = dict(imports=['hetdpt_mm', 'hetdpt_mm.models.distill'],
                      allow_failed_imports=False)

model = dict(
    # Hard distillation (DeiT) from a frozen copy of the model taken just
    # before the first removal: no extra teacher to download or train.
    type='HetDPTDistillClassifier',
    distill=dict(mode='hard', alpha=0.5),
    backbone=dict(gated=True))
