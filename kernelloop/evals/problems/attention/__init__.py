"""The attention suite: the reference work's six attention variants (1-6) as problems, two long
sequences (7, 8), a learned relative-bias table (9) and 2D neighborhood attention (10), scored
against FlexAttention (and SDPA's fused backends where SDPA computes the variant: 1, 5, 7).

Each numbered file is one problem; `_common.py` holds what they share (the eager reference,
the FlexAttention and SDPA baselines, the inputs), so a variant file holds only its own math.
"""
