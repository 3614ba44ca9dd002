"""Fixed-size image columns of a tabular task: decoding, normalisation, data checks, drift and the first batch.

A column holds one image per row, as raw bytes (uint8, row-major, ``prod(shape)`` of them, what Parquet stores
for ``np.ndarray.tobytes()``) or as a list/array of ``prod(shape)`` numbers. ``tabular_task(images=[...])``
(``components/tasks/public.py``) reads each such column itself: the model gets it as one more input
``[batch, channels, height, width]`` float32, scaled by ``max_value`` and standardised with the train split's
pixel mean and std; validation checks every image decodes to its shape; the watcher judges each image's mean
intensity, ink fraction (pixels above half of ``max_value``) and its layout profile for drift: the mean pixel of
each of at most ``PROFILE_BANDS`` bands of rows (``COLUMN__row_I``) and of columns (``COLUMN__col_J``). Those
profiles are what make the orientation visible: a writer that stores some images column-major (transposed) or
flipped moves ink from rows to columns, which no orientation-blind statistic (mean, ink, pixel histogram) shows;
validation compares them between partitions (``steps/validate_data/image_layout.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

# Bands of rows and of columns in an image's layout profile (a 28 x 28 image: 8 bands of 3-4 rows each).
PROFILE_BANDS = 8


@dataclass(frozen=True)
class Image:
    """A column of fixed-size images: ``shape`` is (height, width) or (channels, height, width); pixel values
    lie in [0, ``max_value``] (16 for scikit-learn's digits, 255 for 8-bit images)."""

    column: str
    shape: tuple[int, ...]
    max_value: float = 255.0

    def __post_init__(self) -> None:
        if len(self.shape) not in (2, 3) or not all(isinstance(n, int) and n >= 1 for n in self.shape):
            raise ValueError(f"Image {self.column!r}: shape must be (height, width) or (channels, height, width) "
                             f"of positive integers, got {self.shape!r}")
        if not self.max_value > 0:
            raise ValueError(f"Image {self.column!r}: max_value must be > 0, got {self.max_value!r}")

    @property
    def chw(self) -> tuple[int, int, int]:
        """The tensor shape of one image: (channels, height, width)."""
        return tuple(self.shape) if len(self.shape) == 3 else (1, *self.shape)  # type: ignore[return-value]

    @property
    def size(self) -> int:
        return math.prod(self.shape)


def decode_pixels(values: pd.Series, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(pixels [rows, size] float32, decodable [rows] bool) from bytes or arrays; undecodable rows are zero."""
    pixels = np.zeros((len(values), size), dtype=np.float32)
    ok = np.zeros(len(values), dtype=bool)
    for i, value in enumerate(values):
        if isinstance(value, bytes | bytearray) and len(value) == size:
            pixels[i], ok[i] = np.frombuffer(value, dtype=np.uint8), True
        elif isinstance(value, list | tuple | np.ndarray) and len(value) == size:
            pixels[i], ok[i] = np.asarray(value, dtype=np.float32), True
    return pixels, ok


def fit_images(train: pd.DataFrame, images: Sequence[Image]) -> dict[str, dict[str, float]]:
    """Each image column's pixel mean and std (after scaling by ``max_value``) over the train split's images."""
    fitted = {}
    for image in images:
        pixels, ok = decode_pixels(train[image.column], image.size)
        scaled = pixels[ok] / image.max_value
        std = float(scaled.std()) if scaled.size else 1.0
        fitted[image.column] = {"mean": float(scaled.mean()) if scaled.size else 0.0, "std": std if std > 1e-12 else 1.0}
    return fitted


def image_arrays(frame: pd.DataFrame, images: Sequence[Image], fitted: dict[str, Any]) -> list[np.ndarray]:
    """The model's image inputs for these rows: one [rows, C, H, W] float32 array per image column."""
    out = []
    for image in images:
        pixels, _ = decode_pixels(frame[image.column], image.size)
        stats = fitted[image.column]
        normalised = (pixels / image.max_value - stats["mean"]) / stats["std"]
        out.append(np.ascontiguousarray(normalised.reshape(len(frame), *image.chw), dtype=np.float32))
    return out


def check_columns(frame: pd.DataFrame, images: Sequence[Image]) -> pd.DataFrame:
    """``COLUMN__decodable`` and ``COLUMN__pixels`` (the value count) per row, for ``expectations``."""
    derived = {}
    for image in images:
        values = frame[image.column]
        _, ok = decode_pixels(values, image.size)
        derived[f"{image.column}__decodable"] = ok
        derived[f"{image.column}__pixels"] = values.map(lambda v: len(v) if hasattr(v, "__len__") else -1).astype("int64")
    return pd.DataFrame(derived, index=frame.index)


def expectations(images: Sequence[Image]) -> list[dict[str, Any]]:
    """Every image decodes, to exactly its shape's number of values (critical: a model cannot read it else)."""
    out = []
    for image in images:
        shape = "x".join(map(str, image.shape))
        out += [
            {"type": "expect_column_values_to_be_in_set",
             "kwargs": {"column": f"{image.column}__decodable", "value_set": [True]},
             "meta": {"notes": f"every image in '{image.column}' decodes to {shape} pixels"}, "severity": "critical"},
            {"type": "expect_column_values_to_be_between",
             "kwargs": {"column": f"{image.column}__pixels", "min_value": image.size, "max_value": image.size},
             "meta": {"notes": f"shape: {image.size} pixel values ({shape})"}, "severity": "critical"},
        ]
    return out


def _band_means(values: np.ndarray, bands: int) -> np.ndarray:
    """[rows, n] -> [rows, bands]: the mean of each of ``bands`` contiguous, near-equal groups of the n columns."""
    groups = np.array_split(np.arange(values.shape[1]), bands)
    return np.stack([values[:, g].mean(axis=1) for g in groups], axis=1)


def layout_profile(pixels: np.ndarray, image: Image) -> tuple[np.ndarray, np.ndarray]:
    """([rows, bands_h], [rows, bands_w]): each image's mean pixel (scaled to [0, 1], over channels) in bands of
    its rows and of its columns."""
    c, h, w = image.chw
    grid = pixels.reshape(len(pixels), c, h, w).mean(axis=1) / image.max_value
    return _band_means(grid.mean(axis=2), min(h, PROFILE_BANDS)), _band_means(grid.mean(axis=1), min(w, PROFILE_BANDS))


def drift_columns(frame: pd.DataFrame, images: Sequence[Image]) -> pd.DataFrame:
    """Each image's mean intensity (scaled to [0, 1]), ink fraction (pixels above half of ``max_value``) and layout
    profile (``COLUMN__row_I``, ``COLUMN__col_J``: ``layout_profile``); NaN where the image does not decode."""
    derived = {}
    for image in images:
        pixels, ok = decode_pixels(frame[image.column], image.size)
        derived[f"{image.column}__mean_intensity"] = np.where(ok, pixels.mean(axis=1) / image.max_value, np.nan)
        derived[f"{image.column}__ink_fraction"] = np.where(ok, (pixels > image.max_value / 2).mean(axis=1), np.nan)
        for axis, bands in zip(("row", "col"), layout_profile(pixels, image), strict=True):
            for i in range(bands.shape[1]):
                derived[f"{image.column}__{axis}_{i}"] = np.where(ok, bands[:, i], np.nan)
    return pd.DataFrame(derived, index=frame.index)


def describe_images(tensors: Sequence[Any], images: Sequence[Image], fitted: dict[str, Any]) -> list[dict[str, Any]]:
    """The image tensors of a first batch decoded back to raw pixel values, row by row."""
    rows: list[dict[str, Any]] = [{} for _ in range(len(tensors[0]) if tensors else 0)]
    for tensor, image in zip(tensors, images, strict=True):
        stats = fitted[image.column]
        pixels = (tensor.reshape(len(tensor), image.size).double() * stats["std"] + stats["mean"]) * image.max_value
        for i, row in enumerate(rows):
            row[image.column] = [round(float(v), 3) for v in pixels[i]]
    return rows


def image_mismatches(rows: Sequence[dict[str, Any]], raw: pd.DataFrame, images: Sequence[Image]) -> list[str]:
    """Rows whose dumped image does not decode back to the raw row's pixels."""
    out = []
    for image in images:
        raw_pixels, _ = decode_pixels(raw[image.column], image.size)
        for i, row in enumerate(rows):
            if not np.allclose(row[image.column], raw_pixels[i], atol=1e-2 * image.max_value / 255 + 1e-3):
                out.append(f"row {i} {image.column}: the image tensor does not decode to the raw pixels")
    return out


@dataclass(frozen=True)
class ImageColumns:
    """The image columns a tabular family reads itself, as one codec wrapper the family composes: fitted on the
    train split (``fit``), appended to the model's inputs after ``x_cat`` (``arrays``), validated, drift-checked
    and dumped in the first batch. ``tabular_task(images=[...])`` gives the family one."""

    images: tuple[Image, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.images)

    @property
    def columns(self) -> list[str]:
        return [image.column for image in self.images]

    def fit(self, train: pd.DataFrame) -> dict[str, dict[str, float]]:
        return fit_images(train, self.images)

    def arrays(self, frame: pd.DataFrame, fitted: dict[str, Any]) -> list[np.ndarray]:
        missing = [c for c in self.columns if c not in frame.columns]
        if missing:
            from ctpipe.components.lib.errors import DataValidationError

            raise DataValidationError(f"the rows to score lack image column(s) {', '.join(missing)} that the model reads")
        return image_arrays(frame, self.images, fitted)

    def check_columns(self, frame: pd.DataFrame) -> pd.DataFrame:
        return check_columns(frame, self.images)

    def expectations(self) -> list[dict[str, Any]]:
        return expectations(self.images)

    def drift_columns(self, frame: pd.DataFrame) -> pd.DataFrame:
        return drift_columns(frame, self.images)

    def describe(self, tensors: Sequence[Any], fitted: dict[str, Any]) -> dict[str, Any]:
        """The first batch's image part: the pixels decoded back, the input shapes, and the model call."""
        return {"images": describe_images(tensors, self.images, fitted),
                "image_inputs": [{"shape": list(x.shape), "dtype": str(x.dtype)} for x in tensors],
                "model_input": f"then the image(s) {', '.join(self.columns)} [B, C, H, W]: pixels / max_value, "
                               "standardised"}

    def mismatches(self, dump: dict[str, Any], raw: pd.DataFrame) -> list[str]:
        return image_mismatches(dump["images"], raw, self.images)
