# ./upernet_hetdpt_demo.py (the CPU demo of the DeiT UperNet: demo ADE20K
# shapes, 64x64 crops, narrow heads, short schedule) with the small Swin
# pruned on the demo digits (./swin-demo_digits_prune.py) as backbone, set
# up as configs/upernet_hetdpt_swin-b_ade20k.py sets up Swin-B (mmseg's Swin
# UperNet): the four stage outputs straight into UPerHead (no neck), small
# maps padded to whole windows, no decay on the relative position bias
# tables.  A starting point, not tuned.
_base_ = './upernet_hetdpt_demo.py'

# The merged (or pruned) demo Swin classifier; its record carries the spec.
hetdpt_checkpoint = (
    'work_dirs/swin-demo_digits_prune/swin-demo_digits_prune_merged.pth'
)
widths = [32, 64, 128, 256]  # the four stages' outputs

model = dict(
    # The classifier's Swin (./swin-demo_digits.py) in mmseg's arguments;
    # mmseg's registry gives all four stages and pads small maps.
    backbone=dict(
        _delete_=True,
        type='HetDPTSwin',
        embed_dims=32,
        depths=[2, 2, 2, 2],
        num_heads=[1, 2, 4, 8],
        window_size=4,
        drop_path_rate=0.0,
        init_cfg=dict(type='Pretrained', checkpoint=hetdpt_checkpoint),
    ),
    neck=None,
    decode_head=dict(in_channels=widths),
    auxiliary_head=dict(in_index=2, in_channels=widths[2]),
)  # as Swin's
optim_wrapper = dict(
    paramwise_cfg=dict(
        custom_keys={
            'relative_position_bias_table': dict(decay_mult=0.0),
            'norm': dict(decay_mult=0.0),
        }
    )
)
