"""fmsim: FlashMask column-interval attention masks from Python.

    import fmsim
    r = fmsim.from_mask_mod(mask_mod, B=1, H=1, Sq=32768)   # an attention-gym mask_mod
    r.fits, r.form, r.intervals                              # Paddle startend_row_indices
    r.analyze(128, 64).rho                                   # block sparsity at 128 x 64
    print(r.to_string())                                     # the tile map
    r.plot()                                                 # a matplotlib Figure (Jupyter: `r` shows it)
    r.render("mask.pdf", width_in=3.3)                       # the `fmsim render` figure, paper size
    r.predict(gpu="h200-sm90").time_ms                       # predicted kernel time (fmsim predict)
    m = fmsim.family("causal_document", 32768)               # a paper family, as the CLI builds it

On a GPU, fmsim.torch.flashmask_attention runs fmsim's kernels as a PyTorch op
(it imports torch; `import fmsim` never does).

The C core (libfmsim, built by the project's CMake) does the work through
ctypes; see python/README.md.
"""
from ._native import LIBRARY, FmsimError, binary_path
from .api import check, from_mask_mod, from_paddle
from .families import family, family_names
from .mask import Analysis, CheckResult, ColumnRuns, Mask, Prediction, tile_text
from .palette import LEGEND, PALETTE, TILE_COLORS

__all__ = ["from_mask_mod", "check", "from_paddle", "family", "family_names", "Mask", "CheckResult", "Prediction", "Analysis", "ColumnRuns",
           "FmsimError", "tile_text", "binary_path", "LIBRARY", "PALETTE", "TILE_COLORS", "LEGEND"]
__version__ = "0.1.0"
