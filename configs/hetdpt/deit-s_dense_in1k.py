# Dense DeiT-S (distilled) with the HetDPTViT backbone on ImageNet-1k: the
# control run of deit-s_prune-10l_in1k.py.  deit-b_dense_in1k.py with the
# DeiT-S model and mmpretrain's DeiT-S batch (4 x 256 images per step
# instead of 16 x 64).
_base_ = [
    '../_base_/models/hetdpt_deit-s.py',
    '../_base_/datasets/imagenet_bs256_swin_224.py',
    '../_base_/schedules/imagenet_bs1024_adamw_400e.py',
    'mmpretrain::_base_/default_runtime.py',
]
