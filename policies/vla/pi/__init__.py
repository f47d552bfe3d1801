"""The flow-matching VLA families as upstream defines them: π0 (transformers'
``PI0ForConditionalGeneration``) and π0.5 (PaliGemma plus an action expert with adaptive RMS
norms, built here on transformers' Gemma modules), loaded from openpi's and LeRobot's checkpoint
layouts (:mod:`policies.vla.pi.checkpoint`) and run with upstream's preprocessing
(:mod:`policies.vla.pi.inputs`). ``python -m policies.vla.check`` runs any of them on a file of
inputs, for parity against upstream's outputs.
"""
