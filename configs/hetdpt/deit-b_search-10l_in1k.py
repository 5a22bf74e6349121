# HetDPT stage 1, step 2 on DeiT-B as the authors run it (their
# train_stage1_step2.py and scripts/train_stage1_step2_search.sh;
# docs/method.md §3,
# docs/user_guides/reproduce.md): which 5 attention and 5 GELU layers to
# remove.  The search network is the NON-distilled DeiT-B started from its
# official weights with its head; while a GELU gate is closed the block also
# applies GELU to the residual stream (residual_gelu='act_removed', their
# search-time semantics).  Removal k after (k+1)^2 epochs, within-type by the
# lowest gate score, their constant learning rate (../_base_/schedules/
# hetdpt_search_121e.py).  The found spec is in every checkpoint's record and,
# after training, in <work_dir>/found_spec.json, which stage 2 reads:
#
#   bash tools/dist_train.sh configs/hetdpt/deit-b_search-10l_in1k.py 8
#   bash tools/dist_train.sh configs/hetdpt/deit-b_finetune-10l_in1k.py 8 \
#       --cfg-options model.backbone.prune_spec=work_dirs/deit-b_search-10l_in1k/found_spec.json  # noqa: E501
_base_ = [
    '../_base_/models/hetdpt_deit-b.py',
    'mmpretrain::_base_/datasets/imagenet_bs64_swin_224.py',
    '../_base_/schedules/hetdpt_search_121e.py',
    'mmpretrain::_base_/default_runtime.py',
    '../_base_/gated_ddp.py',
]

# https://dl.fbaipublicfiles.com/deit/deit_base_patch16_224-b5f2ef4d.pth
search_checkpoint = 'checkpoints/deit_base_patch16_224-b5f2ef4d.pth'

model = dict(
    backbone=dict(
        distilled=False,
        gated=True,
        residual_gelu='act_removed',
        init_cfg=dict(checkpoint=search_checkpoint),
    ),
    head=dict(
        _delete_=True,
        type='VisionTransformerClsHead',
        num_classes=1000,
        in_channels=768,
        loss=dict(
            type='LabelSmoothLoss', label_smooth_val=0.1, mode='original'
        ),
        init_cfg=dict(type='PretrainedHeads', checkpoint=search_checkpoint),
    ),
)

# Their script's batch: 512 images per GPU, 8 GPUs; no repeated augmentation
# in the search (their default).
train_dataloader = dict(batch_size=512, num_workers=10)

custom_hooks = [
    dict(
        type='HetDPTPruneHook',
        counts=dict(attn=5, act=5),
        schedule='progressive',
        stages=[4, 5, 7, 9, 11, 13, 15, 17, 19, 21],
        spec_file='found_spec.json',
    ),
]
default_hooks = dict(checkpoint=dict(interval=1, max_keep_ckpts=2))
