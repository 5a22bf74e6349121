# A small Swin on the demo digits (32x32), dense: ./vit-demo_digits.py with
# HetDPTSwin in mmpretrain's Swin classifier layout (the normed last stage,
# global average pooling, a linear head).  ./swin-demo_digits_prune.py prunes
# it.  Make the data first: python tools/make_demo_data.py data/demo
_base_ = ['./vit-demo_digits.py']

# Four stages of two blocks (8 blocks, 16 layers): 32x32 digits give maps of
# 8x8, 4x4, 2x2 and 1x1 (the small ones take the whole map as one window).
swin_arch = dict(embed_dims=32, depths=[2, 2, 2, 2], num_heads=[1, 2, 4, 8])

model = dict(
    backbone=dict(
        _delete_=True,
        type='HetDPTSwin',
        arch=swin_arch,
        window_size=4,
        out_indices=(3,),
        drop_path_rate=0.0,
    ),
    neck=dict(_delete_=True, type='GlobalAveragePooling'),
    head=dict(type='LinearClsHead', in_channels=8 * swin_arch['embed_dims']),
)

# Swin has no class token or position embedding; no decay on its relative
# position bias tables (as mmpretrain's Swin recipes).
optim_wrapper = dict(
    paramwise_cfg=dict(
        _delete_=True,
        norm_decay_mult=0.0,
        bias_decay_mult=0.0,
        custom_keys={
            'relative_position_bias_table': dict(decay_mult=0.0),
            'hetdpt_score': dict(decay_mult=0.0),
        },
    )
)
