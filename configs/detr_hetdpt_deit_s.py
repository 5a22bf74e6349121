# DETR on COCO 2017 with a HetDPT depth-pruned DeiT-S backbone: the model,
# data, optimizer and 12-epoch schedule of detr_hetdpt_deit_b.py.
_base_ = './detr_hetdpt_deit_b.py'

hetdpt_checkpoint = 'checkpoints/hetdpt_deit-s_10l_merged.pth'

model = dict(
    backbone=dict(
        arch='deit-small', init_cfg=dict(checkpoint=hetdpt_checkpoint)
    ),
    neck=dict(in_channels=[384]),
)
