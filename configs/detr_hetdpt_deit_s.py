# detr_hetdpt_deit_b.py with a HetDPT depth-pruned DeiT-S backbone.
_base_ = './detr_hetdpt_deit_b.py'

hetdpt_checkpoint = 'checkpoints/hetdpt_deit-s_10l_merged.pth'
model = dict(
    backbone=dict(arch='deit-small',
                  init_cfg=dict(checkpoint=hetdpt_checkpoint)),
    neck=dict(in_channels=[384]))
