# mmseg's FCN (ADE20K, 512x512 crops, 80k iterations) with a HetDPT-pruned
# DeiT-S backbone: docs/user_guides/transfer.md's recipe for heads that read
# one feature map.  They take the ViT's stride-16 maps as they are (the stock
# FCN reads a dilated ResNet's stride-8 maps; the segmentor upsamples the
# logits to the image either way): the head reads block 11, its auxiliary
# head block 7, no neck.  Data and iterations are mmseg's; the optimizer
# and schedule are those of mmseg's ViT configs (AdamW 6e-5, linear warm-up,
# linear decay), which suit a ViT better than FCN's SGD.
_base_ = 'mmseg::fcn/fcn_r50-d8_4xb4-80k_ade20k-512x512.py'
custom_imports = dict(imports=['hetdpt_mm'], allow_failed_imports=False)

# The merged DeiT-S of configs/hetdpt/deit-s_prune-10l_in1k.py.
hetdpt_checkpoint = 'checkpoints/hetdpt_deit-s_10l_merged.pth'
embed_dims = 384  # DeiT-S

model = dict(
    # mmseg would hand `pretrained` to the backbone; ours loads via init_cfg.
    pretrained=None,
    backbone=dict(
        _delete_=True,
        type='HetDPTViT',
        arch='deit-small',
        distilled=True,  # HetDPT fine-tunes the distilled DeiTs
        img_size=(512, 512),
        out_type='featmap',
        out_indices=(7, 11),
        final_norm=True,  # not mmseg's ViT default (False)
        patch_bias=True,  # DeiT's (mmseg's ViT default: False)
        norm_cfg=dict(type='LN', eps=1e-6),  # DeiT's (mmseg's: 1e-5)
        drop_path_rate=0.1,
        init_cfg=dict(type='Pretrained', checkpoint=hetdpt_checkpoint),
    ),
    decode_head=dict(in_channels=embed_dims, in_index=1),
    auxiliary_head=dict(in_channels=embed_dims, in_index=0),
)

optim_wrapper = dict(
    _delete_=True,
    type='OptimWrapper',
    optimizer=dict(
        type='AdamW', lr=6e-5, betas=(0.9, 0.999), weight_decay=0.01
    ),
    paramwise_cfg=dict(
        custom_keys={
            'pos_embed': dict(decay_mult=0.0),
            'cls_token': dict(decay_mult=0.0),
            'dist_token': dict(decay_mult=0.0),
            'norm': dict(decay_mult=0.0),
        }
    ),
)
param_scheduler = [
    dict(
        type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=1500
    ),
    dict(
        type='PolyLR',
        eta_min=0.0,
        power=1.0,
        begin=1500,
        end=80000,
        by_epoch=False,
    ),
]
