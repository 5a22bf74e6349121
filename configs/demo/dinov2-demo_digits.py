# A small LayerScale ViT on the demo digits, dense: ./vit-demo_digits.py with
# HetDPTLayerScaleViT (DINOv2's LayerScale, gammas starting at 1e-5, and its
# class-token position; docs/user_guides/dinov2.md) in place of HetDPTViT.
# Prune it as ./vit-demo_digits_prune.py does the ViT, or cut its weights to a
# spec with tools/merge_ckpt.py; ./upernet_hetdpt-dinov2_demo.py starts from
# the merged checkpoint.  Make the data first: python tools/make_demo_data.py
_base_ = ['./vit-demo_digits.py']

model = dict(
    backbone=dict(
        type='HetDPTLayerScaleViT',
        layer_scale_init_value=1e-5,
        no_embed_class=False,
    )
)
