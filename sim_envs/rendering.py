"""Offscreen rendering backend selection (EGL, else OSMesa) with a clear error when neither works.

MuJoCo reads ``MUJOCO_GL`` once, when it is first imported, so :func:`select_gl_backend` must run
before ``import mujoco``; ``sim_envs/__init__.py`` calls it first thing.
"""

from __future__ import annotations

import ctypes.util
import os

from protos.user_error import UserError

_BACKEND_LIBRARIES = {"egl": "EGL", "osmesa": "OSMesa"}
INSTALL_HINT = (
    "install a headless GL: `apt-get install libegl1 libgl1` (EGL) or `apt-get install libosmesa6` "
    "(OSMesa), or set MUJOCO_GL=egl|osmesa explicitly"
)


class RenderingUnavailable(UserError, RuntimeError):
    """No offscreen OpenGL backend could render."""


def select_gl_backend() -> str | None:
    """Pick EGL, else OSMesa, unless the user already chose one via ``MUJOCO_GL``."""
    chosen = os.environ.get("MUJOCO_GL")
    if chosen:
        if chosen in _BACKEND_LIBRARIES:
            os.environ.setdefault("PYOPENGL_PLATFORM", chosen)
        return chosen
    for backend, library in _BACKEND_LIBRARIES.items():
        if ctypes.util.find_library(library):
            os.environ["MUJOCO_GL"] = backend
            os.environ["PYOPENGL_PLATFORM"] = backend
            return backend
    return None


def make_renderer(model, height: int, width: int):
    """Create a ``mujoco.Renderer``; raise :class:`RenderingUnavailable` with a fix if it fails."""
    import mujoco

    try:
        return mujoco.Renderer(model, height=height, width=width)
    except Exception as exc:
        backend = os.environ.get("MUJOCO_GL", "<unset>")
        seen = _backend_mujoco_saw()
        if seen is not None and seen != backend:
            raise RenderingUnavailable(
                f"mujoco was imported before sim_envs and so uses MUJOCO_GL={seen or '<unset>'} "
                f"instead of {backend}; import sim_envs first or export MUJOCO_GL={backend}"
            ) from None
        raise RenderingUnavailable(
            f"offscreen rendering failed with MUJOCO_GL={backend} ({type(exc).__name__}: {exc}); "
            f"{INSTALL_HINT}"
        ) from None


def _backend_mujoco_saw() -> str | None:
    """The MUJOCO_GL value mujoco read at its import, where the bindings expose it."""
    try:
        from mujoco.rendering.classic import gl_context
    except ImportError:
        return None
    return getattr(gl_context, "_MUJOCO_GL", None)
