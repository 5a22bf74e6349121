# The dense baseline of upernet_hetdpt_deit_s_ade20k.py (unpruned distilled
# DeiT-S).
_base_ = './upernet_hetdpt_deit_s_ade20k.py'

# https://dl.fbaipublicfiles.com/deit/deit_small_distilled_patch16_224-649709d9.pth
deit_checkpoint = 'checkpoints/deit_small_distilled_patch16_224-649709d9.pth'
model = dict(backbone=dict(init_cfg=dict(checkpoint=deit_checkpoint)))
