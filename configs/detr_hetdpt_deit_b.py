# DETR on COCO 2017 with a HetDPT depth-pruned DeiT-B backbone (METHOD.md §5),
# the paper's 12-epoch schedule.  Everything else is mmdet's own DETR config.
#
# The backbone rebuilds its pruned structure from the checkpoint's
# meta['hetdpt'] (spec, form), so swapping in another pruned model means
# changing `hetdpt_checkpoint` only (or, on the command line,
# --cfg-options model.backbone.init_cfg.checkpoint=PATH).
_base_ = 'mmdet::detr/detr_r50_8xb2-150e_coco.py'
custom_imports = dict(imports=['hetdpt_mm'], allow_failed_imports=False)

# A pruned classification checkpoint in any form: merged (MergeCheckpointHook
# or tools/merge_ckpt.py), pruned, or a gated training checkpoint.
hetdpt_checkpoint = 'checkpoints/hetdpt_deit-b_10l_merged.pth'

model = dict(
    # mmdet's DETR with its attention on PyTorch's fused kernels (same
    # weights and outputs; hetdpt_mm/models/fused_attention.py): at 800x1216
    # mmcv's attention maps cost a fifth of the dense model's time.
    type='FusedAttentionDETR',
    backbone=dict(
        _delete_=True,
        type='HetDPTViT',
        arch='deit-base',
        img_size=224,  # pretraining size; inputs of any size interpolate
        patch_size=16,
        distilled=True,  # HetDPT fine-tunes the distilled DeiT-B
        out_type='featmap',
        out_indices=(11, ),
        drop_path_rate=0.1,
        init_cfg=dict(type='Pretrained', checkpoint=hetdpt_checkpoint)),
    neck=dict(in_channels=[768]))

# The optimizer is mmdet's DETR one: AdamW lr 1e-4, weight decay 1e-4,
# gradient clipping 0.1 and custom_keys backbone lr_mult=0.1.
# Schedule: 12 epochs (paper), lr / 10 after epochs 8 and 11 as in mmdet's
# standard 12-epoch (1x) schedule.
max_epochs = 12
train_cfg = dict(max_epochs=max_epochs)
param_scheduler = [
    dict(type='MultiStepLR', begin=0, end=max_epochs, by_epoch=True,
         milestones=[8, 11], gamma=0.1)
]
