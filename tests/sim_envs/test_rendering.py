import pytest

from sim_envs import rendering


def test_backend_respects_an_explicit_choice(monkeypatch):
    monkeypatch.setenv("MUJOCO_GL", "osmesa")
    monkeypatch.setenv("PYOPENGL_PLATFORM", "")  # restored after the test
    monkeypatch.delenv("PYOPENGL_PLATFORM")
    assert rendering.select_gl_backend() == "osmesa"


def test_backend_prefers_egl_then_osmesa(monkeypatch):
    monkeypatch.setenv("PYOPENGL_PLATFORM", "")
    monkeypatch.delenv("MUJOCO_GL", raising=False)
    monkeypatch.setattr(
        rendering.ctypes.util, "find_library", lambda name: "libOSMesa.so" if name == "OSMesa" else None
    )
    assert rendering.select_gl_backend() == "osmesa"
    monkeypatch.delenv("MUJOCO_GL", raising=False)
    monkeypatch.setattr(rendering.ctypes.util, "find_library", lambda name: None)
    assert rendering.select_gl_backend() is None


def test_render_failure_is_a_clear_error():
    with pytest.raises(rendering.RenderingUnavailable, match="apt-get install"):
        rendering.make_renderer(object(), 64, 64)  # not a model: the GL setup fails
