"""Start-up happens in one place: importing the UI changes no environment; the entry points set
the offline environment (respecting what the user set) and accept the README's app options."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from explorer.cli import _parser
from explorer.core import runtime


@pytest.mark.slow(reason="imports the app module and the figures in a fresh Python")
def test_importing_the_app_module_sets_no_environment():
    code = ("import os; before = dict(os.environ); import explorer.ui.app, explorer.views.figures; "
            "changed = sorted(k for k in os.environ if os.environ.get(k) != before.get(k)); print(changed); "
            "import sys; print('matplotlib.pyplot' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k not in runtime.OFFLINE_ENVIRONMENT}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    changed, pyplot = out.strip().splitlines()[-2:]
    assert not any(name in changed for name in runtime.OFFLINE_ENVIRONMENT), changed
    assert pyplot == "False"  # figures use matplotlib's object API: no pyplot, no backend switch


def test_prepare_process_goes_offline_but_keeps_what_the_user_set(monkeypatch):
    for name in runtime.OFFLINE_ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    runtime.prepare_process()
    assert os.environ["GRADIO_ANALYTICS_ENABLED"] == "False"
    assert os.environ["HF_HUB_DISABLE_TELEMETRY"] == "1"
    assert os.environ["HF_HUB_OFFLINE"] == "0"


def test_cpu_threads_sleep_while_they_wait_unless_the_user_said_otherwise(monkeypatch):
    """OMP_WAIT_POLICY=PASSIVE (issue 63: spinning threads made a one-sentence text forward 10x dearer on a
    loaded machine), set before torch loads: the CLI's module imports no torch before ``main`` runs it."""
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    runtime.prepare_process()
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    runtime.prepare_process()
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"
    # Nor matplotlib or pandas (issue 65: 0.45 s of every command's start, `explorer --help` 0.8 -> 0.4 s): the
    # parser reads the colour maps and the result filters from modules that draw and read nothing.
    code = ("import sys, explorer.cli; explorer.cli._parser(); "  # every command's parser built, as main does
            "print(sorted(m for m in ('torch', 'matplotlib', 'pandas') if m in sys.modules))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "[]"


def test_the_app_takes_its_zoo_folder_after_the_command_too():
    assert _parser().parse_args(["app", "--checkpoints", "zoo-a"]).checkpoints == "zoo-a"  # python app.py --checkpoints
    assert _parser().parse_args(["--checkpoints", "zoo-b", "app"]).checkpoints == "zoo-b"
    assert _parser().parse_args(["app"]).checkpoints is None


def test_the_served_queue_summarises_its_events_every_hundredth_event_not_after_each(monkeypatch):
    """Gradio rebuilds a pandas summary of up to 10,000 past events after every event unless told otherwise
    (25-36 ms a slider change); the app's queue does it every ``ANALYTICS_EVERY`` events."""
    import gradio as gr

    from explorer.serve.access import Access
    from explorer.ui.app import ANALYTICS_EVERY, serve

    monkeypatch.delenv("GRADIO_ANALYTICS_CACHE_FREQUENCY", raising=False)
    with gr.Blocks() as app:
        gr.Textbox()
    queue = serve(app, Access(roots=()))._queue
    records = [{"function": "f", "status": "success", "process_time": 0.1}]
    queue.events_recorded = ANALYTICS_EVERY  # the first summary is due
    first = queue.compute_analytics_summary(records)
    queue.events_recorded += ANALYTICS_EVERY - 1
    assert queue.compute_analytics_summary(records * 2) is first  # not rebuilt yet
    queue.events_recorded += 1
    assert queue.compute_analytics_summary(records * 2)["functions"]["f"]["total_requests"] == 2


@pytest.mark.slow(reason="imports the model blocks and then open_clip in a fresh Python")
def test_model_blocks_come_without_open_clips_model_families_and_the_package_is_whole_when_asked():
    """open_clip's transformer blocks, its tokenizer and torchvision's transforms import without open_clip's and
    torchvision's ``__init__`` (CoCa, Hugging Face towers: transformers; every torchvision model and
    ``torch._dynamo``): 2.3 s and 3 s of every process that reads pictures with a model. ``open_clip.create_model``
    afterwards still finds the whole package, from two threads at once, and torchvision is whole when asked."""
    code = ("import sys, threading; from explorer.models.nn import open_clip_parts; "
            "from explorer.models.tokenizer import tokenize; tokenize(['a red cat'], 77); "
            "from explorer.models.preprocess import Preprocess; from PIL import Image; "
            "Preprocess(32)([Image.new('RGB', (40, 30))]); "
            "print('transformers' in sys.modules, 'open_clip.coca_model' in sys.modules, "
            "'torch._dynamo' in sys.modules, 'torchvision.models' in sys.modules); "
            "from torchvision.ops import roi_align; import torchvision; "
            "print(callable(roi_align), bool(torchvision.__version__), callable(torchvision.models.resnet18)); "
            "import open_clip; found = []; "
            "threads = [threading.Thread(target=lambda: found.append(open_clip.create_model)) for _ in range(2)]; "
            "[t.start() for t in threads]; [t.join() for t in threads]; "
            "from open_clip import CLIP; "
            "print(len(found) == 2 and found[0] is found[1], open_clip.CLIP is CLIP, "
            "open_clip.transformer.Transformer is open_clip_parts.Transformer, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    before, torchvision_whole, after = out.strip().splitlines()[-3:]
    assert before == "False False False False"
    assert torchvision_whole == "True True True"
    assert after == "True True True True"


def test_the_apps_warm_up_takes_what_start_up_made_out_of_the_collectors_walks(monkeypatch):
    """A full collection of the served app walked ~390,000 start-up objects (0.22-0.25 s holding the interpreter,
    every session waiting); frozen after warm-up, none of them (under 1 ms). Objects made later are still
    collected."""
    import gc

    import explorer.ui.app as app_module

    called = []
    monkeypatch.setattr(app_module, "keep_start_up_out_of_collections", lambda: called.append(True))
    app_module.warm_up().join(120)
    assert called == [True]  # once the imports are done

    try:
        runtime.keep_start_up_out_of_collections()
        assert gc.get_freeze_count() > 10_000  # this process's libraries: out of every collection's walk
        import weakref

        class Node:
            pass

        node = Node()
        node.itself = node  # a cycle made after the freeze: garbage once dropped, and collected
        alive = weakref.ref(node)
        del node
        assert alive() is not None  # reference counting alone cannot free a cycle
        gc.collect()
        assert alive() is None
    finally:
        gc.unfreeze()  # the rest of this worker's tests as before
