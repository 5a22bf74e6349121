# ./no-decay_vit.py for the distilled DeiTs: no decay on the distillation
# token either.
_base_ = './no-decay_vit.py'

optim_wrapper = dict(
    paramwise_cfg=dict(custom_keys={'.dist_token': dict(decay_mult=0.0)})
)
