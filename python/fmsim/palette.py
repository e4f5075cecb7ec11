"""The palette and legend texts of `fmsim render` (viz/viz.h, viz/viz_notes.c),
for plots made in Python (notebooks) to look like the command line's figures.
tests/test_python_package.py checks these against viz/viz.h."""

# Okabe-Ito, colour-blind safe: VIZ_RGB_* of viz/viz.h
PALETTE = {
    "background": "#FFFFFF",
    "masked": "#E2E2E2",          # masked element / skipped tile
    "visible": "#0072B2",         # visible element / unmasked tile
    "partial": "#E69F00",         # partial tile
    "partial_masked": "#F6DDAA",  # masked element inside a partial tile
    "hatch": "#1A1A1A",
    "text": "#222222",
    "misfit": "#CC79A7",          # a key column no interval form holds (render marks it)
}

# tile class (0 masked, 1 partial, 2 unmasked) -> colour, as render's tiles layer
TILE_COLORS = [PALETTE["masked"], PALETTE["partial"], PALETTE["visible"]]

# render's legend entries
LEGEND = {
    "tiles": [("masked tile: skipped", PALETTE["masked"]), ("partial tile", PALETTE["partial"]),
              ("unmasked tile", PALETTE["visible"])],
    "mask": [("masked: query i may not attend key j", PALETTE["masked"]),
             ("visible: query i attends key j", PALETTE["visible"])],
}


def tile_cmap():
    """A matplotlib colormap for class arrays (vmin=0, vmax=2)."""
    from matplotlib.colors import ListedColormap
    return ListedColormap(TILE_COLORS)


def mask_cmap():
    """A matplotlib colormap for dense masks as 0 = masked, 1 = visible."""
    from matplotlib.colors import ListedColormap
    return ListedColormap([PALETTE["masked"], PALETTE["visible"]])


def legend(ax, kind: str = "tiles", **kw):
    """Adds render's legend (kind "tiles" or "mask") to a matplotlib axis."""
    from matplotlib.patches import Patch
    handles = [Patch(facecolor=c, edgecolor="#888888", label=t) for t, c in LEGEND[kind]]
    kw.setdefault("fontsize", 8)
    kw.setdefault("loc", "upper right")
    return ax.legend(handles=handles, **kw)
