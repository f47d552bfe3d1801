"""Checks that actions and observations obey an :class:`EnvSpec`, with errors that name the field."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from protos.env_spec import EnvSpec
from protos.user_error import UserError


class ContractError(UserError, ValueError):
    """An action or observation does not match the env contract."""


def validate_action(spec: EnvSpec, action: Any, *, allow_chunk: bool = False) -> np.ndarray:
    """Return ``action`` as float32 if it is a valid step (or chunk) for ``spec``; raise otherwise.

    Accepts ``[action_dim]``, or ``[chunk, action_dim]`` when ``allow_chunk``. Rejects wrong
    shapes, non-numeric dtypes, NaN/inf and values outside the action bounds.
    """
    dim = spec.action.dim
    try:
        arr = np.asarray(action)
    except Exception as exc:
        raise ContractError(f"action could not be read as an array: {exc}") from None
    if arr.dtype == object or not (
        np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)
    ):
        raise ContractError(f"action dtype must be float32 (or numeric), got {arr.dtype}")
    expected = f"[{dim}]" + (f" or [chunk, {dim}]" if allow_chunk else "")
    if arr.ndim == 1:
        if arr.shape[0] != dim:
            raise ContractError(f"action shape expected {expected}, got {list(arr.shape)}")
    elif arr.ndim == 2 and allow_chunk:
        if arr.shape[1] != dim or arr.shape[0] < 1:
            raise ContractError(f"action shape expected {expected}, got {list(arr.shape)}")
    else:
        raise ContractError(f"action shape expected {expected}, got {list(arr.shape)}")
    arr = arr.astype(np.float32, copy=False)
    finite = np.isfinite(arr)
    if not finite.all():
        index = np.argwhere(~finite)[0]
        where = _index_name(spec, index)
        raise ContractError(f"{where} is {arr[tuple(index)]} (must be finite)")
    low, high = spec.action.low_array(), spec.action.high_array()
    tol = 1e-6
    bad = (arr < low - tol) | (arr > high + tol)
    if bad.any():
        index = np.argwhere(bad)[0]
        d = int(index[-1])
        raise ContractError(
            f"{_index_name(spec, index)} = {float(arr[tuple(index)]):.4g} "
            f"is outside [{low[d]:.4g}, {high[d]:.4g}]"
        )
    return arr


def _index_name(spec: EnvSpec, index: np.ndarray) -> str:
    d = int(index[-1])
    prefix = f"action[{int(index[0])}, {d}]" if len(index) == 2 else f"action[{d}]"
    return f"{prefix} ({spec.action.names[d]})"


def validate_observation(spec: EnvSpec, obs: Mapping[str, Any]) -> None:
    """Raise :class:`ContractError` unless ``obs`` has exactly the spec's layout."""
    for key in ("images", "state", "instruction"):
        if key not in obs:
            raise ContractError(f"observation is missing key {key!r}")
    images = obs["images"]
    expected_cams = set(spec.camera_names)
    if set(images) != expected_cams:
        raise ContractError(f"observation cameras expected {sorted(expected_cams)}, got {sorted(images)}")
    for cam in spec.cameras:
        img = images[cam.name]
        if not isinstance(img, np.ndarray) or img.dtype != np.uint8:
            raise ContractError(
                f"camera {cam.name!r} expected uint8 array, got {getattr(img, 'dtype', type(img))}"
            )
        if img.shape != cam.shape:
            h, w, c = cam.shape
            got = "x".join(str(s) for s in img.shape)
            raise ContractError(f"camera {cam.name!r} expected {h}x{w}x{c}, got {got}")
    state = obs["state"]
    if not isinstance(state, np.ndarray) or state.dtype != np.float32:
        raise ContractError(f"state expected float32 array, got {getattr(state, 'dtype', type(state))}")
    if state.shape != (spec.state_dim,):
        raise ContractError(f"state expected shape [{spec.state_dim}], got {list(state.shape)}")
    if not np.isfinite(state).all():
        bad = int(np.argwhere(~np.isfinite(state))[0][0])
        for name, sl in spec.state_slices().items():
            if sl.start <= bad < sl.stop:
                raise ContractError(f"state[{bad}] ({name}) is not finite")
    if not isinstance(obs["instruction"], str):
        raise ContractError(f"instruction expected str, got {type(obs['instruction']).__name__}")
