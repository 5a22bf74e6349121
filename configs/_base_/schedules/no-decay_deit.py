# ./no-decay_vit.py for the distilled DeiTs: no decay on the distillation
# token either.
_base_ = './no-decay_vit.py'

optim_wrapper = dict(paramwise_cfg=dict(custom_keys=_base_.deit_no_decay_keys))
