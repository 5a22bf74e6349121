# The parameters a ViT recipe never decays besides norms and biases (timm's
# optimizer factory, mmpretrain's DeiT recipe), as `custom_keys` of an
# optimizer's `paramwise_cfg`.  ./no-decay_vit.py and ./no-decay_deit.py are
# the whole rule; a config whose other base sets the optimizer inherits this
# file and names these keys: `custom_keys=_base_.deit_no_decay_keys`.
vit_no_decay_keys = {
    '.cls_token': dict(decay_mult=0.0),
    '.pos_embed': dict(decay_mult=0.0),
}
# The distilled DeiTs: the distillation token too.
deit_no_decay_keys = {**vit_no_decay_keys, '.dist_token': dict(decay_mult=0.0)}
