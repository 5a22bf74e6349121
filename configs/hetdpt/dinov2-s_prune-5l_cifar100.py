# The DINOv2-g CIFAR-100 recipe (dinov2-g_prune-15l_cifar100.py) on
# DINOv2-S: 5 of its 24 layers (the giant's 15 of 80 scaled to 12 blocks is
# 4.5), 2 attention + 3 GELU layers (its FFNs are GELU MLPs, whose
# activation merges away).  Small enough for a CPU; the tests build it with
# a tiny DINOv2.
_base_ = './dinov2-g_prune-15l_cifar100.py'

# https://dl.fbaipublicfiles.com/dinov2/dinov2_vits14/dinov2_vits14_pretrain.pth
pretrained_checkpoint = 'checkpoints/dinov2_vits14_pretrain.pth'

model = dict(
    backbone=dict(
        arch='dinov2-small',
        drop_path_rate=0.1,
        with_cp=False,
        init_cfg=dict(checkpoint=pretrained_checkpoint),
    ),
    head=dict(in_channels=384),
)
train_dataloader = dict(batch_size=64)
auto_scale_lr = dict(base_batch_size=512)
custom_hooks = [
    dict(_base_.custom_hooks[0], counts=dict(attn=2, act=3)),
    dict(type='MergeCheckpointHook'),
]
