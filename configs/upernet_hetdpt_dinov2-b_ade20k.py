# UperNet on ADE20K (512x512 crops, 160k iterations) with a HetDPT
# depth-pruned DINOv2-B backbone (docs/user_guides/dinov2.md).  Neck, heads,
# data and schedule are mmseg's DeiT-B UperNet config
# (./_base_/models/upernet_hetdpt_vit.py: 768 channels, outputs of blocks
# 2, 5, 8, 11); only the backbone changes.
_base_ = './_base_/models/upernet_hetdpt_vit.py'

# A merged HetDPT DINOv2-B (tools/merge_ckpt.py cuts official or timm
# DINOv2 weights, or a pruned and fine-tuned checkpoint, to a spec); its
# record gives the pruned structure.  For DINOv2-B with registers use
# arch='dinov2-base-reg4'.
hetdpt_checkpoint = 'checkpoints/hetdpt_dinov2-b_merged.pth'

model = dict(
    backbone=dict(
        type='HetDPTLayerScaleViT',
        arch='dinov2-base',
        # 14 px patches: a 512 crop is padded to 518, DINOv2's own 37x37
        # grid, so the pre-trained position embedding is used as it is.
        img_size=(518, 518),
        patch_size=14,
        distilled=False,
        init_cfg=dict(checkpoint=hetdpt_checkpoint),
    )
)
