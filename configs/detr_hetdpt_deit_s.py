# DETR on COCO 2017 with a HetDPT depth-pruned DeiT-S backbone: the model,
# data, optimizer and 12-epoch schedule of detr_hetdpt_deit_b.py.
_base_ = './_base_/models/detr_hetdpt_vit.py'

hetdpt_checkpoint = 'checkpoints/hetdpt_deit-s_10l_merged.pth'

model = dict(
    backbone=dict(arch='deit-small',
                  init_cfg=dict(checkpoint=hetdpt_checkpoint)),
    neck=dict(in_channels=[384]))

max_epochs = 12
train_cfg = dict(max_epochs=max_epochs)
param_scheduler = [
    dict(type='MultiStepLR', begin=0, end=max_epochs, by_epoch=True,
         milestones=[8, 11], gamma=0.1)
]
