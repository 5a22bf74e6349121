# Gated training under DDP: a closed gate skips its layer, whose parameters
# then get no gradient, which DDP must be told to expect.
model_wrapper_cfg = dict(
    type='MMDistributedDataParallel', find_unused_parameters=True
)
