# mmseg's UperNet Swin-B (ImageNet-1k pre-trained, 512x512 crops, 160k
# iterations, ADE20K) with a HetDPT depth-pruned Swin-B backbone
# (docs/user_guides/swin.md).  Everything is mmseg's own Swin-B config, its
# backbone dict included: only the backbone's type and checkpoint change.
# Built from mmseg's registry, HetDPTSwin reads mmseg's SwinTransformer
# arguments and pads small maps to whole windows as mmseg does (same stage
# outputs, widths 128-1024).
_base_ = 'mmseg::swin/swin-base-patch4-window7-in1k-pre_upernet_8xb2-160k_ade20k-512x512.py'  # noqa
custom_imports = dict(imports=['hetdpt_mm'], allow_failed_imports=False)

# A merged HetDPT Swin-B: tools/merge_ckpt.py cuts official (or pruned and
# fine-tuned) weights to a spec (docs/user_guides/swin.md).
hetdpt_checkpoint = 'checkpoints/hetdpt_swin-b_merged.pth'

model = dict(
    backbone=dict(
        type='HetDPTSwin', init_cfg=dict(checkpoint=hetdpt_checkpoint)
    )
)
