"""SmolVLA as LeRobot publishes it: the cut SmolVLM, the 0.75x expert with cross-attention."""
