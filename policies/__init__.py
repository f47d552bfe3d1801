"""Policy models behind one interface: MLP/CNN, VLAs (OpenVLA, pi0) and world models."""
