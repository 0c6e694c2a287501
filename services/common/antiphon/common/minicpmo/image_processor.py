"""MiniCPM-V's image processor (the one MiniCPM-o 4.5 uses), written here.

The published one is remote code on the hub. vLLM's MiniCPM-o processor
calls it for three things, all here:

- `get_sliced_grid`: how a large image is cut. An image of more than one
  `scale_resolution`-square's area is cut into a grid of slices (at most
  `max_slice_nums`) whose columns/rows ratio is nearest the image's aspect
  ratio, trying one slice fewer and one more than its area asks for.
- `get_slice_image_placeholder`: the prompt text that holds an image's
  tokens, `image_feature_size` (the resampler's queries) `<unk>` for the
  whole image between `<image>` and `</image>`, then as many between
  `<slice>` and `</slice>` for each slice, one text line per grid row.
- `__call__`: the pixels. The whole image resized to about one square's
  area (each side a multiple of the patch), then each slice of a resized
  copy that the grid divides evenly; each normalised and laid out as the
  vision encoder reads it, its patches side by side in one row of patches
  (`[3, patch, patches * patch]`), with its size in patches (`tgt_sizes`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from PIL import Image
from transformers import BatchFeature
from transformers.image_processing_base import ImageProcessingMixin
from transformers.processing_utils import ImagesKwargs

from antiphon.common.minicpmo import tokenizer as tok

Grid = list[int]  # [columns, rows]


def _multiple(length: float, unit: int) -> int:
    """`length` rounded to a multiple of `unit`, at least one `unit`."""
    return max(round(length / unit) * unit, unit)


class MiniCPMVImageKwargs(ImagesKwargs, total=False):
    """The settings a caller may pass through (transformers reads them from here)."""

    max_slice_nums: int
    scale_resolution: int
    patch_size: int
    image_feature_size: int
    use_image_id: bool
    slice_mode: bool


class MiniCPMVImageProcessor(ImageProcessingMixin):
    model_input_names = ["pixel_values"]
    valid_kwargs = MiniCPMVImageKwargs

    def __init__(
        self,
        max_slice_nums: int = 9,
        scale_resolution: int = 448,
        patch_size: int = 14,
        image_feature_size: int = 64,
        use_image_id: bool = True,
        slice_mode: bool = True,
        norm_mean: Sequence[float] = (0.5, 0.5, 0.5),
        norm_std: Sequence[float] = (0.5, 0.5, 0.5),
        version: float | str = 4.5,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)  # type: ignore[no-untyped-call]
        self.max_slice_nums = int(max_slice_nums)
        self.scale_resolution = int(scale_resolution)
        self.patch_size = int(patch_size)
        self.image_feature_size = int(image_feature_size)
        self.use_image_id = bool(use_image_id)
        self.slice_mode = bool(slice_mode)
        # Plain lists: vLLM hashes and serialises the processor's attributes.
        self.mean = [float(v) for v in norm_mean]
        self.std = [float(v) for v in norm_std]
        self.version = version

    # Geometry -------------------------------------------------------------

    def get_sliced_grid(
        self,
        image_size: Sequence[Any],
        max_slice_nums: int | None = None,
        never_split: bool = False,
    ) -> Grid | None:
        """The [columns, rows] an image of `image_size` (width, height) is cut
        into; None when it is not cut."""
        width, height = (int(v) for v in image_size)
        most = self.max_slice_nums if max_slice_nums is None else int(max_slice_nums)
        area = width * height / (self.scale_resolution * self.scale_resolution)
        wanted = min(math.ceil(area), most)
        if wanted <= 1 or never_split:
            return None
        aspect = math.log(width / height)
        best: Grid = [1, 1]
        error = math.inf
        for count in (wanted - 1, wanted, wanted + 1):
            if count == 1 or count > most:
                continue
            for cols in range(1, count + 1):
                if count % cols:
                    continue
                off = abs(aspect - math.log(cols / (count // cols)))
                if off < error:
                    best, error = [cols, count // cols], off
        return best

    def _fit(self, width: float, height: float, upscale: bool) -> tuple[int, int]:
        """(width, height) of about one square's area (only ever smaller unless
        `upscale`), aspect kept, each side a multiple of the patch."""
        if upscale or width * height > self.scale_resolution**2:
            aspect = width / height
            height = int(self.scale_resolution / math.sqrt(aspect))
            width = int(height * aspect)
        return _multiple(width, self.patch_size), _multiple(height, self.patch_size)

    def _refined(self, width: int, height: int, grid: Grid) -> tuple[int, int]:
        """The size the whole image is resized to before it is cut by `grid`."""
        cols, rows = grid
        cell = self._fit(_multiple(width, cols) / cols, _multiple(height, rows) / rows, True)
        return cell[0] * cols, cell[1] * rows

    # Prompt text ----------------------------------------------------------

    def get_slice_image_placeholder(
        self,
        image_size: Sequence[Any],
        image_idx: int = 0,
        max_slice_nums: int | None = None,
        use_image_id: bool | None = None,
    ) -> str:
        tokens = tok.UNK * self.image_feature_size
        text = tok.IMAGE_START + tokens + tok.IMAGE_END
        if self.use_image_id if use_image_id is None else use_image_id:
            text = f"{tok.IMAGE_ID_START}{image_idx}{tok.IMAGE_ID_END}" + text
        grid = self.get_sliced_grid(image_size, max_slice_nums) if self.slice_mode else None
        if grid is not None:
            cols, rows = grid
            line = (tok.SLICE_START + tokens + tok.SLICE_END) * cols
            text += "\n".join([line] * rows)
        return text

    # Pixels ---------------------------------------------------------------

    def slices(self, image: Image.Image, max_slice_nums: int | None = None) -> list[Image.Image]:
        """The whole image, then its slices row by row, each resized."""
        width, height = image.size
        grid = self.get_sliced_grid(image.size, max_slice_nums) if self.slice_mode else None
        whole = image.resize(self._fit(width, height, grid is None), Image.Resampling.BICUBIC)
        if grid is None:
            return [whole]
        refined = image.resize(self._refined(width, height, grid), Image.Resampling.BICUBIC)
        cols, rows = grid
        cell_w, cell_h = refined.width // cols, refined.height // rows
        cells = [
            refined.crop((c * cell_w, r * cell_h, (c + 1) * cell_w, (r + 1) * cell_h))
            for r in range(rows)
            for c in range(cols)
        ]
        return [whole, *cells]

    def _patches(self, image: Image.Image) -> tuple[torch.Tensor, list[int]]:
        """`[3, patch, patches * patch]` and the size in patches (rows, columns)."""
        p = self.patch_size
        pixels = np.asarray(image.convert("RGB"), dtype=np.float32) / 255.0
        mean, std = np.asarray(self.mean, np.float32), np.asarray(self.std, np.float32)
        chw = ((pixels - mean) / std).transpose(2, 0, 1)
        rows, cols = chw.shape[1] // p, chw.shape[2] // p
        # [3, rows, p, cols, p] -> [3, p(y), rows, cols, p(x)]: patch (i, j)
        # lands at columns ((i * cols + j) * p, ...) of a row of patches.
        laid = chw.reshape(3, rows, p, cols, p).transpose(0, 2, 1, 3, 4)
        values = np.ascontiguousarray(laid.reshape(3, p, rows * cols * p))
        return torch.from_numpy(values), [rows, cols]

    def __call__(
        self,
        images: Image.Image | Sequence[Image.Image] | Sequence[Sequence[Image.Image]],
        do_pad: bool = True,
        max_slice_nums: int | None = None,
        return_tensors: Any = None,
        **kwargs: Any,
    ) -> BatchFeature:
        """Per prompt: `pixel_values` (one tensor a slice), `image_sizes`
        ((width, height) a image) and `tgt_sizes` (a slice's size in patches).
        Always torch tensors, whatever `return_tensors` says: the slices'
        sizes differ, and only the model reads them."""
        if isinstance(images, Image.Image):
            batches: list[list[Image.Image]] = [[images]]
        elif images and isinstance(images[0], Image.Image):
            batches = [[i for i in images if isinstance(i, Image.Image)]]
        else:
            batches = [
                [i for i in b if isinstance(i, Image.Image)]
                for b in images
                if not isinstance(b, Image.Image)
            ]
        pixel_values, image_sizes, tgt_sizes = [], [], []
        for batch in batches:
            pixels: list[torch.Tensor] = []
            sizes: list[list[int]] = []
            for image in batch:
                for piece in self.slices(image, max_slice_nums):
                    values, size = self._patches(piece)
                    pixels.append(values)
                    sizes.append(size)
            pixel_values.append(pixels)
            image_sizes.append([torch.tensor(image.size) for image in batch])
            tgt_sizes.append(torch.tensor(sizes, dtype=torch.int32).reshape(-1, 2))
        return BatchFeature(
            data={"pixel_values": pixel_values, "image_sizes": image_sizes, "tgt_sizes": tgt_sizes}
        )

    def preprocess(self, images: Any, **kwargs: Any) -> BatchFeature:
        return self(images, **kwargs)
