# ./upernet_hetdpt_demo.py with the small LayerScale ViT of
# ./dinov2-demo_digits.py as backbone, as
# configs/upernet_hetdpt_dinov2-b_ade20k.py is the DeiT-B UperNet with
# DINOv2-B: the same neck, heads, data and schedule; only the backbone type
# changes.
_base_ = './upernet_hetdpt_demo.py'

# The demo LayerScale classifier cut to a spec, e.g.
#   python tools/merge_ckpt.py work_dirs/dinov2-demo_digits/epoch_10.pth \
#       work_dirs/dinov2-demo_digits/dinov2-demo_digits_merged.pth \
#       --spec '{"attn_removed": [0, 3], "act_removed": [2, 5]}'
# Its record carries the spec.
hetdpt_checkpoint = (
    'work_dirs/dinov2-demo_digits/dinov2-demo_digits_merged.pth'
)

model = dict(
    backbone=dict(
        type='HetDPTLayerScaleViT',
        layer_scale_init_value=1e-5,
        no_embed_class=False,
        init_cfg=dict(checkpoint=hetdpt_checkpoint),
    )
)
