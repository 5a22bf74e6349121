# ./hetdpt_deit-b_hard-distill.py for DeiT-S: the distilled DeiT-S of
# ./hetdpt_deit-s.py taught by the dense non-distilled DeiT-S (79.9 %).
_base_ = './hetdpt_deit-b_hard-distill.py'

# https://dl.fbaipublicfiles.com/deit/deit_small_distilled_patch16_224-649709d9.pth
pretrained_checkpoint = (
    'checkpoints/deit_small_distilled_patch16_224-649709d9.pth'
)
# https://dl.fbaipublicfiles.com/deit/deit_small_patch16_224-cd65a155.pth
teacher_checkpoint = 'checkpoints/deit_small_patch16_224-cd65a155.pth'

model = dict(
    backbone=dict(
        arch='deit-small',
        drop_path_rate=0.0,
        init_cfg=dict(checkpoint=pretrained_checkpoint),
    ),
    head=dict(
        in_channels=384, init_cfg=dict(checkpoint=pretrained_checkpoint)
    ),
    teacher=dict(backbone=dict(arch='deit-small'), head=dict(in_channels=384)),
    teacher_checkpoint=teacher_checkpoint,
)
