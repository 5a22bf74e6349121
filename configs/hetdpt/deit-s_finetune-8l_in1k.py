# HetDPT stage 2 on DeiT-S: deit-b_finetune-10l_in1k.py with the distilled
# DeiT-S as the start and the dense non-distilled DeiT-S (79.9 %) as the
# teacher.  There is no published DeiT-S spec, so the spec is the one your
# deit-s_search-8l_in1k.py run found (its found_spec.json; another file
# through the same option, model.backbone.prune_spec).  The release gives no
# DeiT-S stage-2 settings: these are the DeiT-B run's
# (docs/user_guides/reproduce.md).
#
#   bash tools/dist_train.sh configs/hetdpt/deit-s_finetune-8l_in1k.py 8
_base_ = './deit-b_finetune-10l_in1k.py'

# https://dl.fbaipublicfiles.com/deit/deit_small_distilled_patch16_224-649709d9.pth
pretrained_checkpoint = (
    'checkpoints/deit_small_distilled_patch16_224-649709d9.pth'
)
# https://dl.fbaipublicfiles.com/deit/deit_small_patch16_224-cd65a155.pth
teacher_checkpoint = 'checkpoints/deit_small_patch16_224-cd65a155.pth'
found_spec = 'work_dirs/deit-s_search-8l_in1k/found_spec.json'

model = dict(
    backbone=dict(
        arch='deit-small',
        prune_spec=found_spec,
        init_cfg=dict(checkpoint=pretrained_checkpoint),
    ),
    head=dict(
        in_channels=384, init_cfg=dict(checkpoint=pretrained_checkpoint)
    ),
    teacher=dict(backbone=dict(arch='deit-small'), head=dict(in_channels=384)),
    teacher_checkpoint=teacher_checkpoint,
)
