# ViTDet's Mask R-CNN (ViT-B, simple feature pyramid, large-scale jitter,
# 100 epochs, COCO 2017) with a HetDPT depth-pruned windowed ViT-B backbone
# (docs/user_guides/sam_vitdet.md).  The model is mmdet's projects/ViTDet
# config with its `ViT` swapped for type='HetDPTViTDet' (the same arguments)
# and the HetDPT checkpoint: blocks 2, 5, 8 and 11 attend globally, the
# others in 14x14 windows, all with relative positions.  SimpleFPN and LN2d,
# which mmdet's wheel lacks (they live in its projects/), are registered by
# hetdpt_mm where mmdet has none.  Layer-wise learning-rate decay (0.7, as
# ViTDet's) counts blocks by their index whatever was removed from them.
_base_ = [
    'mmdet::_base_/models/mask-rcnn_r50_fpn.py',
    'mmdet::common/lsj-100e_coco-instance.py',
]
custom_imports = dict(imports=['hetdpt_mm'], allow_failed_imports=False)

# A merged HetDPT windowed ViT-B (tools/merge_ckpt.py cuts MAE, ViTDet or
# pruned and fine-tuned weights to a spec; the record sets the structure).
hetdpt_checkpoint = 'checkpoints/hetdpt_vitdet-b_merged.pth'
backbone_norm_cfg = dict(type='LN', requires_grad=True)
norm_cfg = dict(type='LN2d', requires_grad=True)
image_size = (1024, 1024)
batch_augments = [
    dict(type='BatchFixedSizePad', size=image_size, pad_mask=True)
]

model = dict(
    data_preprocessor=dict(pad_size_divisor=32, batch_augments=batch_augments),
    backbone=dict(
        _delete_=True,
        type='HetDPTViTDet',
        img_size=1024,
        patch_size=16,
        embed_dim=768,
        depth=12,
        num_heads=12,
        drop_path_rate=0.1,
        window_size=14,
        mlp_ratio=4,
        qkv_bias=True,
        norm_cfg=backbone_norm_cfg,
        window_block_indexes=[0, 1, 3, 4, 6, 7, 9, 10],
        use_rel_pos=True,
        init_cfg=dict(type='Pretrained', checkpoint=hetdpt_checkpoint),
    ),
    neck=dict(
        _delete_=True,
        type='SimpleFPN',
        backbone_channel=768,
        in_channels=[192, 384, 768, 768],
        out_channels=256,
        num_outs=5,
        norm_cfg=norm_cfg,
    ),
    rpn_head=dict(num_convs=2),
    roi_head=dict(
        bbox_head=dict(
            type='Shared4Conv1FCBBoxHead',
            conv_out_channels=256,
            norm_cfg=norm_cfg,
        ),
        mask_head=dict(norm_cfg=norm_cfg),
    ),
)

# ViTDet's AdamW with layer-wise decay; no decay on norms, biases and the
# position tables.
optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    constructor='HetDPTLayerDecayOptimWrapperConstructor',
    optimizer=dict(
        type='AdamW', lr=1e-4, betas=(0.9, 0.999), weight_decay=0.1
    ),
    paramwise_cfg=dict(
        layer_decay_rate=0.7,
        custom_keys={
            'bias': dict(decay_mult=0.0),
            'pos_embed': dict(decay_mult=0.0),
            'rel_pos_h': dict(decay_mult=0.0),
            'rel_pos_w': dict(decay_mult=0.0),
            'norm': dict(decay_mult=0.0),
        },
    ),
)
