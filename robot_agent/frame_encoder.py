"""Camera frames to wire frames: each camera encoded on its own thread (JPEG or raw, per the link
config), stamped with the time the camera captured it."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from protos import link_codec
from protos import robot_link_pb2 as pb


class FrameEncoder:
    """Encodes one observation's images in parallel (the codecs release the GIL)."""

    def __init__(self, cameras: int, codec: str, jpeg_quality: int) -> None:
        self.codec, self.jpeg_quality = codec, jpeg_quality
        self.pool = ThreadPoolExecutor(max(1, cameras), thread_name_prefix="jpeg")

    def encode(self, images: dict[str, np.ndarray], capture_ns: dict[str, int]) -> list[pb.Frame]:
        futures = [
            self.pool.submit(link_codec.encode_frame, name, image, self.codec, self.jpeg_quality)
            for name, image in images.items()
        ]
        frames = [future.result() for future in futures]
        for frame in frames:
            frame.capture_mono_ns = capture_ns.get(frame.camera, 0)
        return frames

    def close(self) -> None:
        self.pool.shutdown(wait=False)
