# mmdet's Mask R-CNN Swin-T (FPN, 1x schedule, COCO 2017) with a HetDPT
# depth-pruned Swin-T backbone (docs/user_guides/swin.md).  Neck, heads, data,
# AdamW and the 12-epoch schedule are mmdet's own Swin-T config; only the
# backbone changes.  Its four stage outputs (strides 4-32, widths 96-768) are
# what mmdet's SwinTransformer gives the FPN; small maps are padded to whole
# windows as there (pad_small_map).
_base_ = 'mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py'
custom_imports = dict(imports=['hetdpt_mm'], allow_failed_imports=False)

# A merged HetDPT Swin-T: tools/merge_ckpt.py cuts official (or pruned and
# fine-tuned) weights to a spec (docs/user_guides/swin.md).
hetdpt_checkpoint = 'checkpoints/hetdpt_swin-t_merged.pth'

model = dict(
    backbone=dict(
        _delete_=True,
        type='HetDPTSwin',
        arch='tiny',
        window_size=7,
        drop_path_rate=0.2,
        out_indices=(0, 1, 2, 3),
        pad_small_map=True,
        with_cp=False,
        init_cfg=dict(type='Pretrained', checkpoint=hetdpt_checkpoint),
    )
)
