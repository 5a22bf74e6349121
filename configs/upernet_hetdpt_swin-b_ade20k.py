# mmseg's UperNet Swin-B (ImageNet-1k pre-trained, 512x512 crops, 160k
# iterations, ADE20K) with a HetDPT depth-pruned Swin-B backbone
# (docs/user_guides/swin.md).  Heads, data, optimizer and schedule are mmseg's
# own Swin-B config; only the backbone changes (same stage outputs, widths
# 128-1024, small maps padded to whole windows as mmseg's SwinTransformer
# does).
_base_ = 'mmseg::swin/swin-base-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py'  # noqa
custom_imports = dict(imports=['hetdpt_mm'], allow_failed_imports=False)

# A merged HetDPT Swin-B: tools/merge_ckpt.py cuts official (or pruned and
# fine-tuned) weights to a spec (docs/user_guides/swin.md).
hetdpt_checkpoint = 'checkpoints/hetdpt_swin-b_merged.pth'

model = dict(
    backbone=dict(
        _delete_=True,
        type='HetDPTSwin',
        arch='base',
        window_size=7,
        drop_path_rate=0.3,
        out_indices=(0, 1, 2, 3),
        pad_small_map=True,
        with_cp=False,
        init_cfg=dict(type='Pretrained', checkpoint=hetdpt_checkpoint),
    )
)
