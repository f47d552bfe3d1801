"""gRPC's C core writes INFO lines (a peer's GOAWAY, a failed handshake) straight to stderr; the link
reports robots arriving and leaving through our own logging instead, at the level each deserves.

``quiet_grpc_core()`` sets ``GRPC_VERBOSITY=ERROR`` unless the user set it (``GRPC_VERBOSITY=INFO``
brings the core's lines back). It must run before ``grpc`` is imported: the ``trainer`` and
``robot_agent`` packages call it in their ``__init__``, so their CLIs, benchmarks and tests that host
a link in-process all get it.
"""

from __future__ import annotations

import os


def quiet_grpc_core() -> None:
    """Keep gRPC core's INFO lines off the terminal unless ``GRPC_VERBOSITY`` says otherwise."""
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
