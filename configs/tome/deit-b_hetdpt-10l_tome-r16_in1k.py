# The merged HetDPT DeiT-B (10 layers removed) with token merging (ToMe),
# 16 tokens per block: HetDPT and ToMe compose (paper, Appendix B, Fig. 8).
# Everything else is the stage-2 fine-tuning config;
# docs/user_guides/token_merge.md.
_base_ = '../hetdpt/deit-b_finetune-10l_in1k.py'

model = dict(backbone=dict(token_merge=dict(r=16)))
