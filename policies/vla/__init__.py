"""Vision-language-action policies (``policy.kind=vla``, the ``.[vla]`` extra).

One :class:`~policies.vla.policy.VLAPolicy` over a Hugging Face vision-language backbone
(:mod:`policies.vla.backbone`), with one of two action heads: OpenVLA-style action tokens
(:mod:`policies.vla.token_head`) or pi0-style flow matching (:mod:`policies.vla.flow_head`).
Nothing here is imported unless a VLA is asked for, so the small-policy path never loads
transformers.
"""
