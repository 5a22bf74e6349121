# mmdet's DETR with a HetDPT depth-pruned ViT backbone (docs/method.md §5).
# mmdet
# defines DETR's model only in its full config, so this inherits that config
# (with its COCO data, optimizer and runtime) and changes the model.  The neck
# reads DeiT-B's width; configs built on it name the arch and the checkpoint,
# and other archs the neck's input width.
#
# The backbone rebuilds its pruned structure from the checkpoint's
# meta['hetdpt'] (spec, form), so swapping in another pruned model means
# changing the checkpoint only (or, on the command line,
# --cfg-options model.backbone.init_cfg.checkpoint=PATH).
_base_ = 'mmdet::detr/detr_r50_8xb2-150e_coco.py'
custom_imports = dict(imports=['hetdpt_mm'], allow_failed_imports=False)
# Epochs seeded from (seed, epoch): --resume exact with random augmentation,
# under any runner (docs/advanced/reliability.md).
default_hooks = dict(epoch_seed=dict(type='EpochSeedHook'))

model = dict(
    # mmdet's DETR with its attention on PyTorch's fused kernels (same
    # weights and outputs; hetdpt_mm/models/fused_attention.py): at 800x1216
    # mmcv's attention maps cost a fifth of the dense model's time.
    type='FusedAttentionDETR',
    backbone=dict(
        _delete_=True,
        type='HetDPTViT',
        img_size=224,  # pretraining size; inputs of any size interpolate
        patch_size=16,
        distilled=True,  # HetDPT fine-tunes the distilled DeiTs
        out_type='featmap',
        out_indices=(11,),  # the last of DeiT-B's or DeiT-S's 12 blocks
        drop_path_rate=0.1,
        # A pruned classification checkpoint in any form: merged
        # (MergeCheckpointHook or tools/merge_ckpt.py), pruned, or a gated
        # training checkpoint; or a dense DeiT for the baselines.
        init_cfg=dict(type='Pretrained'),
    ),
    neck=dict(in_channels=[768]),
)
