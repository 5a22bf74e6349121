# MAP data collection for Swin-S on ImageNet-1k: swin-b_map-collect_in1k.py
# (read it for the recipe and the commands) on the official Swin-S
# (mmpretrain's Swin-S differs from its Swin-B by width and drop path only),
# as many steps as swin-s_prune-10l_in1k.py's budget of 10.
_base_ = './swin-b_map-collect_in1k.py'

pretrained_checkpoint = 'checkpoints/swin_small_patch4_window7_224.pth'
num_steps = 10

model = dict(
    backbone=dict(
        arch='small',
        drop_path_rate=0.3,  # mmpretrain's Swin-S
        init_cfg=dict(checkpoint=pretrained_checkpoint),
    ),
    head=dict(
        in_channels=768, init_cfg=dict(checkpoint=pretrained_checkpoint)
    ),
)
train_cfg = dict(max_epochs=_base_.interval * num_steps)
custom_hooks = [dict(_base_.custom_hooks[0], max_removed=num_steps)]
