# mmdet's Mask R-CNN (FPN, 1x schedule, COCO 2017) with a HetDPT-pruned
# DeiT-S backbone: docs/user_guides/transfer.md's recipe for two-stage
# detectors.
#
# A ViT gives stride-16 maps only.  mmseg's MultiLevelNeck resizes four of
# them (blocks 3, 5, 7, 11) to strides 4, 8, 16 and 32, which the config's
# FPN turns into P2-P6 (strides 4-64, the P6 max-pooled): the strides of
# Mask R-CNN's anchors ([4, 8, 16, 32, 64]) and of its RoI extractors
# ([4, 8, 16, 32]).  Heads, losses, data and the 12-epoch schedule are
# mmdet's; the optimizer is AdamW, as ViT detectors are trained, with no
# weight decay on norms, biases, tokens and the position embedding.
_base_ = [
    'mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py',
    './_base_/schedules/no-decay_keys.py',
]
custom_imports = dict(imports=['hetdpt_mm'], allow_failed_imports=False)

# The merged DeiT-S of configs/hetdpt/deit-s_prune-10l_in1k.py.
hetdpt_checkpoint = 'checkpoints/hetdpt_deit-s_10l_merged.pth'
embed_dims = 384  # DeiT-S

model = dict(
    backbone=dict(
        _delete_=True,
        type='HetDPTViT',
        arch='deit-small',
        distilled=True,  # HetDPT fine-tunes the distilled DeiTs
        out_type='featmap',
        out_indices=(3, 5, 7, 11),
        drop_path_rate=0.1,
        init_cfg=dict(type='Pretrained', checkpoint=hetdpt_checkpoint),
    ),
    neck=[
        dict(
            type='mmseg.MultiLevelNeck',
            in_channels=[embed_dims] * 4,
            out_channels=256,
            scales=[4, 2, 1, 0.5],
        ),
        dict(type='FPN', in_channels=[256] * 4, out_channels=256, num_outs=5),
    ],
)

optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(
        type='AdamW', lr=1e-4, betas=(0.9, 0.999), weight_decay=0.05
    ),
    paramwise_cfg=dict(
        norm_decay_mult=0.0,
        bias_decay_mult=0.0,
        custom_keys=_base_.deit_no_decay_keys,
    ),
)
