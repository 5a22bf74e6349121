# The merged HetDPT DeiT-B (10 layers removed) with graph-based token
# propagation (GTP-ViT), 20 patches per block as the GTP-ViT paper's DeiT-B:
# the 7 blocks that keep their attention propagate (paper, Appendix B, Fig.
# 8). Everything else is the stage-2 fine-tuning config;
# docs/user_guides/token_merge.md.
_base_ = '../hetdpt/deit-b_finetune-10l_in1k.py'

model = dict(backbone=dict(graph_propagation=dict(num_prop=20)))
