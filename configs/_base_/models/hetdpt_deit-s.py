# DeiT-S (distilled) as a classifier with the HetDPTViT backbone: what
# mmpretrain's DeiT-S recipe (deit-small-distilled_4xb256_in1k.py) changes in
# the DeiT-B model, i.e. the arch and the head's width, and no drop path.
_base_ = './hetdpt_deit-b.py'

# https://dl.fbaipublicfiles.com/deit/deit_small_distilled_patch16_224-649709d9.pth
pretrained_checkpoint = (
    'checkpoints/deit_small_distilled_patch16_224-649709d9.pth'
)

model = dict(
    backbone=dict(
        arch='deit-small',
        drop_path_rate=0.0,
        init_cfg=dict(checkpoint=pretrained_checkpoint),
    ),
    head=dict(
        in_channels=384, init_cfg=dict(checkpoint=pretrained_checkpoint)
    ),
)
