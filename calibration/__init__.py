"""Camera intrinsics, hand-eye extrinsics and sim-camera alignment."""
