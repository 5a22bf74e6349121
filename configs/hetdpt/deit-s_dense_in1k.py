# Dense DeiT-S (distilled) with the HetDPTViT backbone on ImageNet-1k: the
# control run of deit-s_prune-10l_in1k.py and the _base_ of the other DeiT-S
# configs here.  deit-b_dense_in1k.py with what mmpretrain's DeiT-S recipe
# (deit-small-distilled_4xb256_in1k.py) changes: the arch, the head's width,
# no drop path and 4 x 256 images per step instead of 16 x 64.
_base_ = './deit-b_dense_in1k.py'

# https://dl.fbaipublicfiles.com/deit/deit_small_distilled_patch16_224-649709d9.pth
pretrained_checkpoint = \
    'checkpoints/deit_small_distilled_patch16_224-649709d9.pth'

model = dict(
    backbone=dict(
        arch='deit-small',
        drop_path_rate=0.0,
        init_cfg=dict(checkpoint=pretrained_checkpoint)),
    head=dict(in_channels=384))
train_dataloader = dict(batch_size=256)
