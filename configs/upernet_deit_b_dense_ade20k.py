# The dense baseline of upernet_hetdpt_deit_b_ade20k.py: the same UperNet
# with the unpruned, distilled DeiT-B (the model HetDPT starts from).
_base_ = './upernet_hetdpt_deit_b_ade20k.py'

# https://dl.fbaipublicfiles.com/deit/deit_base_distilled_patch16_224-df68dfff.pth
deit_checkpoint = 'checkpoints/deit_base_distilled_patch16_224-df68dfff.pth'
model = dict(backbone=dict(init_cfg=dict(checkpoint=deit_checkpoint)))
