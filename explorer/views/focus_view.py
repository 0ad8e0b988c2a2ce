"""One sentence's maps, large: a plotly image per model side by side, to zoom into and read values from.

The maps board shows every sentence at panel size; this shows the one picked at the working size
of the picture, with the map's value under the pointer (plotly's hover), the Otsu contour (white)
and, when the truth is known, the truth's outline (green dashed) on top; zoom and pan are linked
across the models. The map is drawn from the same stored result as the board (``MapsView``): no
model runs here.
"""

from __future__ import annotations

import base64
import functools
import io

import numpy as np

from explorer.core.markup import escape
from explorer.core.errors import ExplorerError
from explorer.views.maps_view import MapsView
from explorer.views.panels import draw_contour, fit_size, hatch, outline, resize_maps
from explorer.views.render import overlay
from explorer.views.settings import ViewSettings

HOVER_SIDE = 256  # map values sent to the browser per side at most (the hover reads them; the picture is full size)
PLOT_WIDTH = 1200  # pixels the page gives the plot at a 1400 px window: the height follows, so maps fill it
TRUTH_COLOUR = "#00e676"
TURBO = "Turbo"
PLOTLY_SCALES = {"turbo": "Turbo", "viridis": "Viridis", "jet": "Jet"}


class FocusError(ExplorerError):
    """A sentence that the drawn maps do not have."""


def check_sentence(view: MapsView, sentence) -> int:
    """``sentence`` (0-based) as an int the view has; anything else is refused with the range."""
    if isinstance(sentence, bool) or not isinstance(sentence, (int, np.integer, float)) or \
            (isinstance(sentence, float) and not sentence.is_integer()):
        raise FocusError(f"pick a sentence by its number (1 to {len(view.sentences)})")
    number = int(sentence)
    if not 0 <= number < len(view.sentences):
        spans = len(view.sentences) - view.n_sentences
        rows = f"{view.n_sentences} sentence(s)" + (f" and {spans} span row(s)" if spans else "")
        raise FocusError(f"there is no row {number + 1}: the board has {rows}, numbered from 1")
    return number


FOCUS_QUALITY = 90


def encoded(pixels: np.ndarray) -> str:
    from PIL import Image

    # JPEG: a focus panel (a photo under a map; outlines are drawn as lines over it) encodes in ~10 ms and
    # ~120 KB; as PNG it took ~0.2-0.8 s and ~0.8-2 MB a panel, most of the 6 s between a click and the view.
    buffer = io.BytesIO()
    Image.fromarray(pixels).convert("RGB").save(buffer, format="JPEG", quality=FOCUS_QUALITY)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _outline_xy(mask: np.ndarray) -> tuple[list, list]:
    """The mask's outlines as one polyline (None between pieces), in pixel coordinates."""
    from skimage.measure import find_contours

    xs, ys = [], []
    for contour in find_contours(np.pad(mask.astype(np.float32), 1), 0.5):
        xs += [*(contour[:, 1] - 1).tolist(), None]
        ys += [*(contour[:, 0] - 1).tolist(), None]
    return xs, ys


def _side_note(model, settings: ViewSettings, i: int) -> str:
    """" · mask: the region outside the outline (86 % of the picture)" where the mask is the background (``MaskSide``), else ""."""
    side = model.mask_sides(settings.threshold)[i]
    return f" · {side.label}" if side.outside and settings.mask != "none" else ""


def focus_figure(view: MapsView, settings: ViewSettings, sentence: int):
    """A plotly figure: for every model, sentence ``sentence``'s map over the picture at working size.

    Written as plotly's own JSON layout and handed over unchecked (``_validate=False``): plotly's checks of every
    property, through ``make_subplots`` and ``update_*``, took 0.7-0.9 s of a loaded 2-core machine per open, the
    figure itself 0.01 s. Every key below is one plotly documents; tests read the figure back."""
    import plotly.graph_objects as go

    i = check_sentence(view, sentence)
    width, height = view.picture.size
    # Each panel's title on a line of its own, starting over its panel (the first model's on top): at a 390-px
    # phone four panels are 80 px wide, and titles side by side ran into one another.
    titles = [f"<b>{escape(m.name)}</b> · {escape(m.kind)}"
              + (" · flat map" if m.flat(i) else _side_note(m, settings, i))
              for m in view.models]
    truth = None
    if view.truth is not None and i < len(view.truth.masks) and view.truth.masks[i] is not None:
        truth = _outline_xy(np.asarray(view.truth.masks[i]))
    hover = fit_size((width, height), HOVER_SIDE)
    scale_x, scale_y = width / hover[0], height / hover[1]
    traces, layout = [], {}
    domains = panel_domains(len(view.models))
    for m, model in enumerate(view.models):
        axes = {"xaxis": "x" if m == 0 else f"x{m + 1}", "yaxis": "y" if m == 0 else f"y{m + 1}"}
        values = model.maps[i]
        low, high = view.colour_range(settings.scale, m)
        low = float(values.min()) if low is None else low
        high = float(values.max()) if high is None else high
        mask = model.masks(settings.threshold)[i]
        pixels = np.asarray(overlay(view.picture, values, settings.cmap, settings.opacity, low, high))
        if settings.mask != "none" and not model.flat(i):  # a constant map has no mask to outline
            if model.mask_sides(settings.threshold)[i].outside:  # the mask is the background: hatched
                pixels = hatch(pixels, mask)
            pixels = draw_contour(pixels, outline(mask))
        traces.append({"type": "image", "source": encoded(pixels), "hoverinfo": "skip", **axes})
        # The values, invisible, on the same pixels: the hover reads them (a shrunk copy for a large picture).
        shown = values if hover == (width, height) else resize_maps(values[None], hover)[0]
        traces.append({"type": "heatmap", "z": shown.astype(np.float32), "x0": (scale_x - 1) / 2, "dx": scale_x,
                       "y0": (scale_y - 1) / 2, "dy": scale_y, "zmin": low, "zmax": high, "opacity": 0.0,
                       "colorscale": _colorscale(settings.cmap), "showscale": False,
                       "name": model.name, **axes,
                       "hovertemplate": "x %{x:.0f}, y %{y:.0f}<br>value %{z:.4g}<extra>" + escape(model.name)
                                        + "</extra>"})
        if truth is not None:
            traces.append({"type": "scatter", "x": truth[0], "y": truth[1], "mode": "lines", "name": "truth",
                           "line": {"color": TRUTH_COLOUR, "width": 2, "dash": "dash"}, "hoverinfo": "skip",
                           "showlegend": m == 0, **axes})
        # Zoom and pan are linked: every panel's axes match the first's, whose pixels are square.
        suffix = "" if m == 0 else str(m + 1)
        layout[f"xaxis{suffix}"] = {"domain": domains[m], "anchor": axes["yaxis"], "range": [-0.5, width - 0.5],
                                    "showticklabels": False, **({} if m == 0 else {"matches": "x"})}
        layout[f"yaxis{suffix}"] = {"domain": [0.0, 1.0], "anchor": axes["xaxis"], "range": [height - 0.5, -0.5],
                                    "showticklabels": False, **({"scaleanchor": "x"} if m == 0 else {"matches": "y"})}
    threshold = "Otsu" if settings.threshold is None else f"{settings.threshold:.2f} of the range"
    side = PLOT_WIDTH / len(view.models) * height / width
    lines = len(titles) * TITLE_LINE
    heads = [dict(text=title, showarrow=False, xref="paper", yref="paper", x=domains[m][0], y=1,
                  xanchor="left", yanchor="bottom", yshift=4 + (len(titles) - 1 - m) * TITLE_LINE,
                  font=dict(size=13)) for m, title in enumerate(titles)]
    layout.update(template=_template(), height=int(min(720 + lines, max(280, side + 70 + lines))),
                  margin=dict(l=10, r=10, t=20 + lines, b=40), hovermode="closest",
                  legend=dict(orientation="h", y=-0.02), annotations=heads + [dict(
                      text=f"white: the {threshold} mask's outline" + (", green: the truth" if truth else ""),
                      showarrow=False, xref="paper", yref="paper", x=0, y=-0.06, xanchor="left",
                      font=dict(size=12))])
    return go.Figure({"data": traces, "layout": layout}, _validate=False)


TITLE_LINE = 18  # pixels per panel title line


@functools.cache
def _template() -> dict:
    """Plotly's default template as JSON (what a checked figure gets on its own), read once."""
    import plotly.io as pio

    return pio.templates[pio.templates.default].to_plotly_json()


def _colorscale(cmap: str) -> list:
    """The colour scale as plotly.js takes it: a list of stops (its own names lack Turbo)."""
    from plotly.colors import get_colorscale

    return get_colorscale(PLOTLY_SCALES.get(cmap, TURBO))


PANEL_SPACING = 0.02  # between panels, a fraction of the figure's width


def panel_domains(count: int) -> list[list[float]]:
    """Where each of ``count`` panels lies across the figure (paper units), side by side, equal widths."""
    width = (1.0 - PANEL_SPACING * (count - 1)) / count
    return [[m * (width + PANEL_SPACING), m * (width + PANEL_SPACING) + width] for m in range(count)]


__all__ = ["FocusError", "check_sentence", "focus_figure"]
