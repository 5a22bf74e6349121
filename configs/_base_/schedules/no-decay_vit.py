# The ViT weight-decay rule (timm's optimizer factory, mmpretrain's DeiT
# recipe): no decay on norms, biases, the class token and the position
# embedding.  A schedule that inherits it sets its own optimizer.
optim_wrapper = dict(
    paramwise_cfg=dict(
        norm_decay_mult=0.0,
        bias_decay_mult=0.0,
        custom_keys={
            '.cls_token': dict(decay_mult=0.0),
            '.pos_embed': dict(decay_mult=0.0),
        },
    )
)
