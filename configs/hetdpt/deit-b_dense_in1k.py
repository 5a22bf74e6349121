# Dense DeiT-B (distilled) with the HetDPTViT backbone on ImageNet-1k: the
# control run of deit-b_prune-10l_in1k.py (same start, data, augmentation,
# optimizer and 400-epoch schedule, no pruning).  Data, augmentation
# (RandAugment, Mixup, CutMix, label smoothing) and optimizer are
# mmpretrain's DeiT recipe (deit-base-distilled_16xb64_in1k.py).
_base_ = [
    '../_base_/models/hetdpt_deit-b.py',
    'mmpretrain::_base_/datasets/imagenet_bs64_swin_224.py',
    '../_base_/schedules/imagenet_bs1024_adamw_400e.py',
    'mmpretrain::_base_/default_runtime.py',
]
