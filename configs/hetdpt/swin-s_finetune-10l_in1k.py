# Swin-S with a fixed HetDPT spec, ImageNet-1k: the row of the paper's
# Table 1 (Swin-S, 10 layers: 43.9 M parameters, 7.3 G MACs, 1.23x, 82.4 %)
# as a spec.  The paper publishes no Swin spec; this one is a guess that
# matches its parameters and MACs (docs/user_guides/swin.md, "Specs of the
# paper's rows"; docs/user_guides/reproduce.md, "Swin-S and Swin-B"): 7
# attention + 3 GELU layers, the fitting split MAP (on the paper's DeiT-B
# points) predicts best for 10 layers.  Merged: 43.90 M parameters (classifier
# head included) and 7.27 G MACs counting the attention products (7.10 G
# without).
#
# The network starts from the official Swin-S classifier (heads included)
# with the spec applied (pruned form: GELU-free FFNs stay two linears while
# they train) and is fine-tuned with swin-s_prune-10l_in1k.py's recipe
# (mmpretrain's stock Swin-S one); MergeCheckpointHook writes
# <work_dir>/swin-s_finetune-10l_in1k_merged.pth.
#
#   bash tools/dist_train.sh configs/hetdpt/swin-s_finetune-10l_in1k.py 16
_base_ = './swin-s_prune-10l_in1k.py'

# Attention: the last seven W-MSA blocks of stage 3 (blocks 4-21); GELU:
# both blocks of stage 2 and the last block of stage 3.
paper_row_spec = dict(
    attn_removed=[8, 10, 12, 14, 16, 18, 20], act_removed=[2, 3, 21]
)

model = dict(backbone=dict(gated=False, prune_spec=paper_row_spec))

custom_hooks = [dict(type='MergeCheckpointHook')]
# Every remaining parameter gets a gradient: no gates.
model_wrapper_cfg = dict(_delete_=True, type='MMDistributedDataParallel')
