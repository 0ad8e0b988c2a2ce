"""Defaults by measurement (issue 58, part 1): a method without its own sentence map opens on the map kind it
measured best on the held-out world, declared on its class with its figures, and those figures are the
results file's; a method with its own map keeps it; the kind note shows what each chosen model draws."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from explorer.models.map_kinds import EXPLAINER_KINDS, GENERIC_MAP
from explorer.models.measured import MeasuredGrounding
from explorer.models.methods import get_method
from plugin_fixtures import on_path, write_dist_info  # noqa: F401  (on_path: a fixture)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "plugins" / "explorer-dreamlip"


def results_table(results: str, model: str) -> dict[str, tuple[float, float]]:
    """{kind: (mIoU, pointing)} in percent, one decimal, of ``model`` in an `explorer eval` results file."""
    report = json.loads((ROOT / results).read_text())
    entry = next(m for m in report["models"] if m["name"] == model)
    return {kind: (round(100 * v["miou"], 1), round(100 * v["pointing"], 1)) for kind, v in entry["map_kinds"].items()}


def best_of(table: dict[str, tuple[float, float]]) -> str:
    """The rule written out again: the highest mean of mIoU and pointing, ties to pointing."""
    return max(table, key=lambda k: (sum(table[k]) / 2, table[k][1]))


def check_declared(measured: MeasuredGrounding) -> dict[str, tuple[float, float]]:
    """The declared figures are the results file's, and cover the generic map and every explainer measured."""
    table = results_table(measured.results, measured.model)
    candidates = {k for k in table if k in (GENERIC_MAP, *EXPLAINER_KINDS)}
    assert candidates <= set(measured.figures), (candidates, measured.figures)
    for kind, figures in measured.figures.items():
        assert table[kind] == figures, (measured.model, kind, table[kind], figures)
    assert measured.command.startswith("explorer ")
    return {k: table[k] for k in measured.figures}


@pytest.mark.parametrize("name, expected", [("clip", "gradcam"), ("longclip", "gradcam"), ("goal", "clearclip")])
def test_a_method_without_its_own_map_opens_on_its_best_measured_kind(name, expected):
    import explorer
    from explorer.views.maps_view import default_kind, resolve_kind

    cls = get_method(name)
    assert cls.preferred_native_map is None
    table = check_declared(cls.measured_grounding)
    assert best_of(table) == expected == cls.measured_grounding.best()
    model = explorer.Model(cls.example("tiny"), name="m", device="cpu")
    assert default_kind(model) == expected and resolve_kind(model, "native") == (expected, None)


def test_goal_does_not_open_on_its_worst_kind():
    measured = get_method("goal").measured_grounding
    worst = min(measured.figures, key=lambda k: sum(measured.figures[k]))
    assert worst == "legrad" and measured.figures["gradcam"] == (3.5, 4.4) and measured.best() != "gradcam"


def test_a_method_with_its_own_sentence_map_keeps_it(on_path, tmp_path):
    import explorer
    from explorer.models.methods import plugins
    from explorer.views.maps_view import default_kind

    if "dreamlip" not in plugins.entry_point_names():
        write_dist_info(tmp_path / "site", "explorer-dreamlip", "0.1.0",
                        {"dreamlip": "explorer_dreamlip.method:DreamLipMethod"})
        on_path(EXAMPLE, tmp_path / "site")
    cls = get_method("dreamlip")
    table = check_declared(cls.measured_grounding)  # the plugin declares its own figures too
    assert best_of(table) == "gradcam" != cls.preferred_native_map
    model = explorer.Model(cls.example("tiny"), name="m", device="cpu")
    assert default_kind(model) == "grouping"  # its mechanism is what people come to see
    assert default_kind(explorer.Model(get_method("finelip").example("tiny"), name="f", device="cpu")) == \
        "late-interaction"


def test_an_unmeasured_method_without_its_own_map_falls_back_to_gradcam():
    import explorer
    from explorer.views.maps_view import default_kind

    class Unmeasured(get_method("clip")):
        measured_grounding = None

    assert default_kind(explorer.Model(Unmeasured.example("tiny"), name="u", device="cpu")) == "gradcam"


def test_the_kind_note_names_each_models_default_with_its_figures():
    from types import SimpleNamespace

    from explorer.ui.kind_notes import kind_note

    methods = {"demo-goal": "goal", "demo-caft": "caft", "demo-clip": "clip"}
    zoo = SimpleNamespace(get=lambda name: SimpleNamespace(method=methods[name]))
    note = kind_note("native", zoo, list(methods))
    assert "**demo-goal**: `clearclip`, GOAL's best measured (mIoU 10.7 %, pointing 30.2 % for demo-goal)" in note
    assert "**demo-caft**: its own `attention-pool` map" in note
    assert "**demo-clip**: `gradcam`, CLIP's best measured (mIoU 46.8 %" in note
    assert note.count("`explorer data synth") == 1 and "demo-eval-seed3.json" in note  # the command, once
    assert "lattice" in kind_note("legrad")


def test_the_page_says_when_a_measured_default_map_points_at_nothing_on_the_picture():
    """Issue 66: GOAL's default (ClearCLIP, its best measured on the held-out world) points at nothing on the
    shipped default example; the board and the status line say so, for that model only."""
    import numpy as np
    from PIL import Image

    from explorer.grounding.sentence_maps import GroundingResult
    from explorer.grounding.truth import Truth
    from explorer.models.model import SentenceMaps
    from explorer.ui import maps_board, maps_tab
    from explorer.views.maps_view import MapsView, ModelMaps
    from explorer.views.settings import ViewSettings

    side = 32
    hot_corner = np.zeros((side, side), np.float32)
    hot_corner[:8, :8] = 1.0
    picture = Image.fromarray(np.full((side, side, 3), 90, np.uint8))
    truth = np.zeros((side, side), bool)
    truth[20:30, 20:30] = True  # the object sits elsewhere: the peak misses it

    def maps(name, measured):
        grid = np.stack([hot_corner, hot_corner * 0.5 + 0.1])
        result = GroundingResult(image=picture, analysis=None, model_name=name, maps=SentenceMaps(
            maps=grid, grid=grid, kind="clearclip", sentences=["A square.", "A square again."], n_cut=[0, 0]))
        return ModelMaps(name=name, result=result, measured_default=measured)

    view = MapsView(picture=picture, sentences=["A square.", "A square again."],
                    models=[maps("demo-goal", True), maps("asked-for", False)], truth=Truth([truth, truth], "test"))
    settings = ViewSettings(models=["demo-goal", "asked-for"])
    notes = view.default_notes(None)
    assert len(notes) == 1 and notes[0].startswith("demo-goal's default map (clearclip") and "pointing 0 %" in notes[0]
    assert 'data-warning="default-map"' in maps_board.board_html(view, settings)
    assert "**Default map:** demo-goal" in maps_tab.status_text(view, settings)
    view.models[0].measured_default = False  # a kind the visitor asked for: no such line
    assert view.default_notes(None) == []
