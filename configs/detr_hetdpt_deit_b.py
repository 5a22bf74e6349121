# DETR on COCO 2017 with a HetDPT depth-pruned DeiT-B backbone (docs/method.md
# §5),
# the paper's 12-epoch schedule.  Everything else is mmdet's own DETR config
# (./_base_/models/detr_hetdpt_vit.py).
_base_ = './_base_/models/detr_hetdpt_vit.py'

hetdpt_checkpoint = 'checkpoints/hetdpt_deit-b_10l_merged.pth'

model = dict(
    backbone=dict(
        arch='deit-base', init_cfg=dict(checkpoint=hetdpt_checkpoint)
    )
)

# The optimizer is mmdet's DETR one: AdamW lr 1e-4, weight decay 1e-4,
# gradient clipping 0.1 and custom_keys backbone lr_mult=0.1.
# Schedule: 12 epochs (paper), lr / 10 after epochs 8 and 11 as in mmdet's
# standard 12-epoch (1x) schedule.
max_epochs = 12
train_cfg = dict(max_epochs=max_epochs)
param_scheduler = [
    dict(
        type='MultiStepLR',
        begin=0,
        end=max_epochs,
        by_epoch=True,
        milestones=[8, 11],
        gamma=0.1,
    )
]
