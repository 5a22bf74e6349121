# mmseg's UperNet on ADE20K (512x512 crops, 160k iterations) with a HetDPT
# depth-pruned SAM ViT-B image encoder (docs/user_guides/sam_vitdet.md):
# mmseg's DeiT-B UperNet config (MultiLevelNeck to strides 4-32, UPerHead,
# FCN auxiliary head) with its backbone replaced by HetDPTWindowedViT in
# mmpretrain's ViTSAM arguments.  The four maps come from blocks 2, 5, 8 and
# 11 (the global ones) without SAM's conv neck (out_channels=0: 768 wide, as
# the heads expect); windows of 14 and relative positions as SAM's, the
# global tables made for 512x512 inputs (resampled from a 1024 checkpoint
# when it loads).
_base_ = 'mmseg::vit/vit_deit-b16_mln_upernet_8xb2-160k_ade20k-512x512.py'
custom_imports = dict(imports=['hetdpt_mm'], allow_failed_imports=False)

# A merged HetDPT SAM ViT-B encoder (tools/merge_ckpt.py cuts the official
# SAM, timm or mmpretrain weights to a spec; the record sets the structure).
hetdpt_checkpoint = 'checkpoints/hetdpt_sam-b_merged.pth'

model = dict(
    pretrained=None,
    backbone=dict(
        _delete_=True,
        type='HetDPTWindowedViT',
        arch='base',
        img_size=512,
        patch_size=16,
        window_size=14,
        out_channels=0,
        out_indices=(2, 5, 8, 11),
        drop_path_rate=0.1,
        init_cfg=dict(type='Pretrained', checkpoint=hetdpt_checkpoint),
    ),
)
