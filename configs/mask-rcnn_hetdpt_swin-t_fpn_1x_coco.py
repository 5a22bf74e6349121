# mmdet's Mask R-CNN Swin-T (FPN, 1x schedule, COCO 2017) with a HetDPT
# depth-pruned Swin-T backbone (docs/user_guides/swin.md).  Everything is
# mmdet's own Swin-T config, its backbone dict included: only the backbone's
# type and checkpoint change.  Built from mmdet's registry, HetDPTSwin reads
# mmdet's SwinTransformer arguments and pads small maps to whole windows as
# mmdet does, so its four stage outputs (strides 4-32, widths 96-768) are
# what the FPN gets from mmdet's backbone.
_base_ = 'mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py'
custom_imports = dict(imports=['hetdpt_mm'], allow_failed_imports=False)

# A merged HetDPT Swin-T: tools/merge_ckpt.py cuts official (or pruned and
# fine-tuned) weights to a spec (docs/user_guides/swin.md).
hetdpt_checkpoint = 'checkpoints/hetdpt_swin-t_merged.pth'

model = dict(
    backbone=dict(
        type='HetDPTSwin', init_cfg=dict(checkpoint=hetdpt_checkpoint)
    )
)
