# mmseg's UperNet for DeiT-B on ADE20K (512x512 crops, 160k iterations) with
# a HetDPT depth-pruned ViT backbone (docs/method.md §5).  Neck
# (MultiLevelNeck),
# heads (UPerHead + FCN auxiliary, 768 channels as DeiT-B's), data and
# schedule are those of mmseg's config, which this inherits since mmseg
# defines that model there; configs built on it name the arch and the
# checkpoint, and narrower archs the neck's and heads' widths.
#
# The backbone rebuilds its pruned structure from the checkpoint's
# meta['hetdpt'], so swapping in another pruned model means changing the
# checkpoint only.  Depth pruning keeps all 12 blocks, so
# out_indices=(2, 5, 8, 11) keep their meaning.
_base_ = 'mmseg::vit/vit_deit-b16_mln_upernet_8xb2-160k_ade20k-512x512.py'
custom_imports = dict(imports=['hetdpt_mm'], allow_failed_imports=False)
# Epochs seeded from (seed, epoch): --resume exact with random augmentation,
# under any runner (docs/advanced/reliability.md).
default_hooks = dict(epoch_seed=dict(type='EpochSeedHook'))

model = dict(
    # mmseg would hand `pretrained` to the backbone; ours loads via init_cfg.
    pretrained=None,
    backbone=dict(
        _delete_=True,
        type='HetDPTViT',
        img_size=(512, 512),
        patch_size=16,
        distilled=True,  # HetDPT fine-tunes the distilled DeiTs
        out_type='featmap',
        out_indices=(2, 5, 8, 11),
        final_norm=False,  # as mmseg's VisionTransformer in this config
        patch_bias=True,  # DeiT's (mmseg's ViT default: False)
        norm_cfg=dict(type='LN', eps=1e-6),  # DeiT's (mmseg's: 1e-5)
        drop_path_rate=0.1,
        interpolate_mode='bicubic',
        # A pruned classification checkpoint in any form: merged
        # (MergeCheckpointHook or tools/merge_ckpt.py), pruned, or a gated
        # training checkpoint; or a dense DeiT for the baselines.
        init_cfg=dict(type='Pretrained'),
    ),
)
