# Swin-B with a fixed HetDPT spec, ImageNet-1k: the row of the paper's
# Table 1 (Swin-B: 55.3 M parameters, 9.8 G MACs, 1.60x, 82.9 %) as a spec.
# The paper publishes neither the spec nor its number of layers; this one
# is a guess that matches its parameters and MACs (docs/user_guides/swin.md,
# "Specs of the paper's rows"; docs/user_guides/reproduce.md, "Swin-S and
# Swin-B"): 4 attention + 13 GELU layers, of the fitting specs the one MAP (on
# the paper's DeiT-B points) predicts best.  Merged: 55.31 M parameters
# (classifier head included) and 9.82 G MACs counting the attention products
# (9.63 G without).
#
# swin-s_finetune-10l_in1k.py with Swin-B: the official Swin-B classifier
# with the spec applied, fine-tuned with swin-b_prune-17l_in1k.py's recipe
# (mmpretrain's stock Swin-B one); MergeCheckpointHook writes
# <work_dir>/swin-b_finetune-17l_in1k_merged.pth.
#
#   bash tools/dist_train.sh configs/hetdpt/swin-b_finetune-17l_in1k.py 16
_base_ = './swin-b_prune-17l_in1k.py'

# Attention: every block of stages 1 and 2 (blocks 0-3); GELU: the last
# block of stages 1 and 2, the last nine of stage 3 (blocks 4-21) and both
# of stage 4.
paper_row_spec = dict(
    attn_removed=[0, 1, 2, 3],
    act_removed=[1, 3, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23],
)

model = dict(backbone=dict(gated=False, prune_spec=paper_row_spec))

custom_hooks = [dict(type='MergeCheckpointHook')]
# Every remaining parameter gets a gradient: no gates.
model_wrapper_cfg = dict(_delete_=True, type='MMDistributedDataParallel')
