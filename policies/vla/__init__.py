"""Vision-language-action policies (``policy.kind=vla``, the ``.[vla]`` extra), as upstream
publishes them, each behind the one :class:`~policies.base.Policy` interface:

- :mod:`policies.vla.openvla`: OpenVLA and OpenVLA-OFT (Prismatic: fused DINOv2 + SigLIP, Llama-2;
  action tokens, or OFT's parallel chunk);
- :mod:`policies.vla.pi`: π0 (transformers' ``PI0ForConditionalGeneration``) and π0.5;
- :mod:`policies.vla.smolvla`: SmolVLA.

The flow families share :mod:`policies.vla.flow_sde`, the sampler that gives a chunk its log-prob.
``policy.vla.checkpoint`` loads a published folder (its layout says the family); ``tiny:<family>``
builds a randomly initialised instance for tests and CPU runs. Nothing here is imported unless a
VLA is asked for, so the small-policy path never loads transformers.
"""
