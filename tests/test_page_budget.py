"""The page's resource budget (``explorer.serve.budget``), applied where a visitor could spend it: picture
decodes, captions and sentences, heavy requests, uploads, request bodies, exports, links, server paths.

Each test drives the rule the way a remote visitor would reach it (over HTTP against a served page, or
through the handler a page event calls) and fails when the rule is taken out.
"""

from __future__ import annotations

import inspect
import io
import os
import socket
import threading
import time
import uuid
from pathlib import Path

import gradio as gr
import httpx
import numpy as np
import pytest
from PIL import Image

from explorer.core import images
from explorer.core.errors import ImageError
from explorer.serve.access import Access
from explorer.serve.budget import HEAVY, PUBLIC, Budget, BudgetExceeded
from explorer.serve.startup import start_page
from page_fixtures import loopback_http


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def png_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


# ---- pictures: the header first, one full-size copy, a few decodes at once -----------------------------


def test_a_16_bit_picture_is_shrunk_before_it_is_converted(tmp_path, monkeypatch):
    """The 8-bit conversion (float arithmetic) runs on the working size, never on the full picture."""
    path = tmp_path / "deep.png"
    path.write_bytes(png_bytes(np.full((1200, 900), 40000, dtype=np.uint16)))
    seen = []
    convert = images._to_rgb
    monkeypatch.setattr(images, "_to_rgb", lambda image, notes: seen.append(image.size) or convert(image, notes))
    loaded = images.load_image(path, max_side=300)
    assert loaded.image.size == (225, 300) and loaded.image.mode == "RGB"
    assert seen and max(max(size) for size in seen) <= 300
    assert loaded.full_size == (900, 1200) and "16-bit image converted to 8 bits" in loaded.notes
    assert abs(int(np.asarray(loaded.image)[0, 0, 0]) - 40000 // 257) <= 1


def test_a_large_jpeg_is_decoded_at_a_reduced_scale(tmp_path, monkeypatch):
    path = tmp_path / "big.jpg"
    Image.new("RGB", (4000, 3000), (10, 200, 30)).save(path, quality=90)
    decoded = []
    load = Image.Image.load

    def recording_load(self):
        decoded.append(self.size)
        return load(self)

    monkeypatch.setattr(Image.Image, "load", recording_load)
    loaded = images.load_image(path, max_side=500)
    assert loaded.image.size == (500, 375) and loaded.full_size == (4000, 3000)
    assert decoded and max(w for w, _ in decoded) <= 1000  # DCT-scaled (1/4 or 1/8), never 4000 wide


def test_a_deep_picture_past_the_byte_limit_is_refused_from_its_header(tmp_path, monkeypatch):
    path = tmp_path / "deep.png"
    path.write_bytes(png_bytes(np.zeros((200, 200), dtype=np.uint16)))
    monkeypatch.setattr(images, "MAX_DECODE_BYTES", 200 * 200 * 2 - 1)  # 8-bit of that size would fit
    monkeypatch.setattr(Image.Image, "load", lambda self: pytest.fail("decoded a picture past the limit"))
    with pytest.raises(ImageError, match="at 16 bits a pixel"):
        images.load_image(path)


def test_at_most_the_slots_decode_at_once_whatever_the_requests(tmp_path, monkeypatch):
    path = tmp_path / "p.png"
    path.write_bytes(png_bytes(np.zeros((64, 64, 3), dtype=np.uint8)))
    monkeypatch.setattr(images, "_slots", images._slots)  # the process's slots as they were, after the test
    images.set_decode_slots(2)
    running, peak, lock, two_in = [0], [0], threading.Lock(), threading.Event()
    load = Image.Image.load

    def slow_load(self):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            if running[0] >= 2:
                two_in.set()
        two_in.wait(timeout=10)  # the first decode waits for a second one: the peak does not hang on timing
        time.sleep(0.05)  # ...and, the slots broken, a third one has time to come in
        try:
            return load(self)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(Image.Image, "load", slow_load)
    threads = [threading.Thread(target=images.load_image, args=(path,)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert peak[0] == 2


# ---- captions and sentences ------------------------------------------------------------------------


def test_caption_and_sentence_caps_are_checked_before_anything_reads_them():
    from explorer.ui.view_controls import base_settings

    budget = Budget.for_mode(public=True)
    assert (budget.caption_chars, budget.sentences_per_draw) == (20_000, 64)
    assert Budget.for_mode(public=False).caption_chars == 200_000
    assert Budget.for_mode(public=True, caption_chars=500).caption_chars == 500
    fine = " ".join(f"A red circle number {i}." for i in range(64))
    base_settings("maps", "x.png", fine, ["m"], "native", "", None, budget=budget)
    with pytest.raises(BudgetExceeded, match="65 sentences; one Draw on this page takes at most 64"):
        base_settings("maps", "x.png", fine + " One more.", ["m"], "native", "", None, budget=budget)
    with pytest.raises(BudgetExceeded, match="20,000"):
        base_settings("maps", "x.png", "word " * 5000, ["m"], "native", "", None, budget=budget)


def test_every_draw_of_the_public_page_counts_its_sentences(tmp_path, monkeypatch):
    from explorer.ui.app import build_app, serve
    from explorer.zoo import Zoo

    monkeypatch.setenv("EXPLORER_HOME", str(tmp_path / "home"))
    access = Access.for_app(tmp_path / "zoo", public=True)
    app = serve(build_app(Zoo(tmp_path / "zoo"), access=access), access)
    caption = " ".join(f"A red circle number {i}." for i in range(65))
    for name in ("draw_maps", "find_regions", "draw_pca"):
        block_fn = next(fn for fn in app.fns.values() if fn.api_name == name)
        values = [None] * len(block_fn.inputs)
        values[:3] = ["x.png", caption, ["m"]]
        result = block_fn.fn(*values)
        result = list(result)[-1] if inspect.isgenerator(result) else result
        assert "one Draw on this page takes at most 64" in str(result), name


def test_every_handler_refuses_a_text_past_the_cap_before_it_runs():
    """The wrapper ``serve`` puts around every handler: the handler never sees the text."""
    from explorer.ui.app import serve

    seen = []
    with gr.Blocks() as app:
        box, out = gr.Textbox(), gr.Textbox()
        gr.Button().click(lambda text: seen.append(len(text)) or "ok", inputs=box, outputs=out, api_name="echo")
        gr.Button().click(lambda items: seen.append(len(items)) or "ok", inputs=gr.Dropdown(multiselect=True,
                                                                                          allow_custom_value=True),
                          outputs=out)
        gr.Button().click(lambda: "Wrote `/srv/exports/run/maps.png`.", outputs=out)
    serve(app, Access(public=True))
    echo, pick, wrote = (app.fns[i].fn for i in (0, 1, 2))
    assert wrote() == "Wrote `maps.png`."  # a public page's texts name files, not server folders
    assert echo("x" * 20_000) == "ok"
    with pytest.raises(gr.Error, match="25,000 characters long; this page reads at most 20,000"):
        echo("x" * 25_000)
    with pytest.raises(gr.Error, match="at most 20,000"):
        pick(["short", "y" * 25_000])  # inside a list too
    assert seen == [20_000]


def test_long_runs_without_a_space_are_read_in_pieces(monkeypatch):
    """BPE's cost grows with the square of a word's length: no word longer than LONG_RUN reaches it."""
    from explorer.models import tokenizer

    bpe = tokenizer._bpe()
    lengths = []
    original = bpe.bpe
    monkeypatch.setattr(bpe, "bpe", lambda token: lengths.append(len(token)) or original(token))
    run = "abcdefghij" * 500
    assert tokenizer.CLIP_TOKENS.count(f"A red circle {run}.") > 100
    assert max(lengths) <= tokenizer.LONG_RUN
    assert tokenizer.CLIP_TOKENS.count("A photorealistic red circle.") == 8  # real words: as before


def test_open_clips_word_cache_is_bounded():
    from explorer.models.tokenizer import BoundedCache

    cache = BoundedCache({"<start_of_text>": "<start_of_text>"}, limit=3)
    for word in ("a", "b", "c", "d", "e"):
        cache[word] = word
    assert len(cache) <= 3 and cache["<start_of_text>"] == "<start_of_text>" and cache["e"] == "e"


# ---- heavy requests: two at once in all, two per visitor ------------------------------------------------


def serve_tiny(access: Access, blocks: gr.Blocks, uploads=None):
    from explorer.ui.app import page_options, serve

    serve(blocks, access)
    port = free_port()
    start_page(blocks, server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
               **page_options(access, uploads=uploads))
    client = loopback_http(f"http://127.0.0.1:{port}", timeout=60)
    client.get("/")  # the page: its session cookie
    return client


def call(client: httpx.Client, fn_index: int, data: list, session: str | None = None) -> str:
    session = session or uuid.uuid4().hex
    joined = client.post("/gradio_api/queue/join", json={"data": data, "fn_index": fn_index, "session_hash": session})
    if joined.status_code != 200:
        return f"HTTP {joined.status_code} {joined.text}"
    with client.stream("GET", "/gradio_api/queue/data", params={"session_hash": session}) as stream:
        for line in stream.iter_lines():
            if line.startswith("data:") and '"process_completed"' in line:
                return line
    return ""


def test_heavy_requests_share_the_budgets_slots_across_events_and_two_per_session(tmp_path):
    from dataclasses import replace

    assert PUBLIC.heavy_at_once == 2
    # not Gradio's default of 2: the group's limit is the budget's; eight from one address, so no address cap
    budget = replace(PUBLIC, heavy_at_once=3, heavy_per_address=None)
    running, peak, lock, full, release = [0], [0], threading.Lock(), threading.Event(), threading.Event()

    def work(text):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            if running[0] >= budget.heavy_at_once:
                full.set()
        release.wait(timeout=30)  # held until the test lets go: overlap does not hang on timing
        with lock:
            running[0] -= 1
        return text

    def start(target, *args):
        thread = threading.Thread(target=target, args=args, daemon=True)  # a failed assert cannot hang the run
        thread.start()
        return thread

    with gr.Blocks() as blocks:
        box = gr.Textbox()
        for name in ("draw", "regions", "pca"):
            gr.Button().click(work, inputs=box, outputs=box, api_name=name, **HEAVY)
    client = serve_tiny(Access(roots=(tmp_path,), public=True, budget=budget), blocks)
    try:
        replies = []
        threads = [start(lambda i=i: replies.append(call(client, i % 3, ["x"]))) for i in range(8)]
        assert full.wait(timeout=30)
        time.sleep(0.3)  # the group broken, more would come in meanwhile
        release.set()
        for thread in threads:
            thread.join(timeout=60)
        assert len(replies) == 8 and all("process_completed" in r for r in replies)
        assert peak[0] == 3  # Gradio's own limit is two per event: eight could have run at once
        release.clear()
        one = uuid.uuid4().hex  # one visitor: two heavy requests are taken, the third refused
        for fn_index in (0, 1):
            join = client.post("/gradio_api/queue/join", json={"data": ["x"], "fn_index": fn_index,
                                                                "session_hash": one})
            assert join.status_code == 200
        deadline = time.monotonic() + 30
        while running[0] < 2 and time.monotonic() < deadline:  # both running (and counted), however slow
            time.sleep(0.02)
        assert running[0] == 2
        third = client.post("/gradio_api/queue/join", json={"data": ["x"], "fn_index": 2, "session_hash": one})
        assert third.status_code != 200 and "at most 2" in third.text
        release.set()
        with client.stream("GET", "/gradio_api/queue/data", params={"session_hash": one}) as stream:
            completed = 0  # one stream for the session: both answers come on it
            for line in stream.iter_lines():
                completed += '"process_completed"' in line
                if completed == 2:
                    break
        assert completed == 2
    finally:
        release.set()
        blocks.close()


# ---- uploads, request bodies, links ------------------------------------------------------------------


def upload(client: httpx.Client, name: str, data: bytes) -> httpx.Response:
    return client.post("/gradio_api/upload", files={"files": (name, data)})


def test_uploads_need_a_session_take_pictures_only_and_keep_to_their_quota(tmp_path, monkeypatch):
    from dataclasses import replace

    from gradio.utils import get_upload_folder

    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "gradio"))  # not the machine's shared /tmp/gradio
    budget = replace(PUBLIC, uploads_per_session=3, upload_bytes_total=3 * 9000)  # on disk: 4 KB blocks + folder
    with gr.Blocks() as blocks:
        gr.File(file_types=["image"])
    client = serve_tiny(Access(roots=(tmp_path,), public=True, budget=budget), blocks)
    try:
        picture = png_bytes(np.random.default_rng(0).integers(0, 255, (30, 30, 3), dtype=np.uint8))
        assert len(picture) > 2000
        nameless = httpx.post(f"{client.base_url}/gradio_api/upload", files={"files": ("a.png", picture)})
        assert nameless.status_code == 403 and "open the page first" in nameless.text
        fake = upload(client, "notes.png", b"just text, not a picture")
        assert fake.status_code == 415 and "this is not a picture (PNG, JPEG" in fake.text
        assert not list(Path(get_upload_folder()).rglob("notes.png"))  # removed, not kept
        kept = [upload(client, f"p{i}.png", picture) for i in range(3)]
        assert all(reply.status_code == 200 for reply in kept)
        paths = [Path(reply.json()[0]) for reply in kept]
        assert all(path.is_file() for path in paths)
        fourth = upload(client, "p3.png", picture)
        assert fourth.status_code == 429 and "at most 3" in fourth.text
        other = loopback_http(client.base_url, timeout=30)
        other.get("/")
        full = upload(other, "q.png", picture)  # another session; the total would pass 3 x 9000
        assert full.status_code == 429 and "try again later" in full.text
        assert all(path.exists() for path in paths)  # one visitor's upload never removes another's
    finally:
        blocks.close()


def test_a_sessions_upload_bytes_and_age_are_bounded(tmp_path):
    from dataclasses import replace

    from explorer.serve.page_guard import Refusal, UploadLedger

    ledger = UploadLedger(replace(PUBLIC, upload_bytes_per_session=5 * 2**20, upload_seconds=60))
    first = tmp_path / "a" / "a.png"
    first.parent.mkdir()
    first.write_bytes(b"x" * 3 * 2**20)
    ticket = ledger.reserve("s", 3 * 2**20)
    ledger.add_part(ticket)
    ledger.settle(ticket, [first])
    with pytest.raises(Refusal, match="would pass 5 MB"):
        ledger.reserve("s", 3 * 2**20)
    ledger.cancel(ledger.reserve("t", 3 * 2**20))  # another session has its own quota
    ledger.files[first.resolve()].holders["s"] -= 61
    ledger.cancel(ledger.reserve("s", 3 * 2**20))  # the old upload expired: removed, and no longer counted
    assert not first.exists() and ledger.total_bytes() == 0


def bomb_bmp(side: int = 30000) -> bytes:
    """A BMP header claiming ``side`` x ``side`` (past Pillow's decompression-bomb limit) and some noise."""
    import struct

    return (b"BM" + struct.pack("<IHHI", 54 + side * side * 3, 0, 0, 54)
            + struct.pack("<IiiHHIIiiII", 40, side, side, 1, 24, 0, side * side * 3, 2835, 2835, 0, 0)
            + os.urandom(4096))


def upload_files(folder: Path) -> list[Path]:
    return [path for path in folder.rglob("*") if path.is_file()] if folder.exists() else []


def tiny_upload_page(tmp_path, monkeypatch, **quotas):
    """A public page with ``quotas`` (``Budget`` fields), its ledger and its own upload folder."""
    from dataclasses import replace

    from explorer.serve.upload_ledger import UploadLedger

    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "gradio"))
    budget = replace(PUBLIC, **quotas)
    ledger = UploadLedger(budget)
    with gr.Blocks() as blocks:
        gr.File(file_types=["image"])
    client = serve_tiny(Access(roots=(tmp_path,), public=True, budget=budget), blocks, uploads=ledger)
    return client, blocks, ledger


def visitor(client: httpx.Client) -> httpx.Client:
    other = loopback_http(client.base_url, timeout=60)
    other.get("/")  # its own page session
    return other


def test_a_file_the_check_cannot_read_is_refused_in_one_line_and_deleted(tmp_path, monkeypatch, caplog):
    """Pillow's DecompressionBombError (not one of the errors a header check expects) refuses the file too."""
    client, blocks, _ = tiny_upload_page(tmp_path, monkeypatch)
    try:
        with caplog.at_level("WARNING"):
            replies = [upload(client, f"bomb{i}.bmp", bomb_bmp()) for i in range(3)]
        assert [r.status_code for r in replies] == [415] * 3 and "bomb0.bmp: this is not a picture" in replies[0].text
        assert upload_files(tmp_path / "gradio") == []
        assert not [r for r in caplog.records if r.exc_info] and 1 <= len(caplog.records) <= 3  # lines, no traceback
    finally:
        blocks.close()


def test_the_same_file_from_many_sessions_is_counted_once_and_stays_while_one_holds_it(tmp_path, monkeypatch):
    picture = png_bytes(np.random.default_rng(1).integers(0, 255, (200, 200, 3), dtype=np.uint8))
    client, blocks, ledger = tiny_upload_page(tmp_path, monkeypatch, upload_bytes_total=3 * len(picture))
    try:
        sessions = [client] + [visitor(client) for _ in range(5)]
        replies = [upload(session, "same.png", picture) for session in sessions for _ in range(2)]
        assert [r.status_code for r in replies] == [200] * 12  # one file on disk, counted once, not 12 times
        path = Path(replies[0].json()[0])
        assert {Path(r.json()[0]) for r in replies} == {path} and ledger.total_bytes() < 2 * len(picture)
        held = ledger.files[path.resolve()].holders
        for session in list(held)[:5]:
            held[session] -= PUBLIC.upload_seconds + 1  # five sessions' hour is over, the sixth's is not
        upload(client, "other.png", png_bytes(np.zeros((8, 8, 3), dtype=np.uint8)))  # expiry runs here
        assert path.is_file()  # still held by the sixth session
    finally:
        blocks.close()


def test_a_request_with_more_files_than_the_quota_stops_at_the_quota_and_leaves_nothing(tmp_path, monkeypatch):
    from gradio import route_utils

    written = []
    original = route_utils.GradioMultiPartParser.on_headers_finished
    monkeypatch.setattr(route_utils.GradioMultiPartParser, "on_headers_finished",
                        lambda self: written.append(1) or original(self))
    client, blocks, ledger = tiny_upload_page(tmp_path, monkeypatch, uploads_per_session=5)
    try:
        files = [("files", (f"p{i}.png", png_bytes(np.full((1, 1, 3), i, dtype=np.uint8)))) for i in range(60)]
        reply = client.post("/gradio_api/upload", files=files)
        assert reply.status_code == 429 and "at most 5" in reply.text
        assert len(written) <= 7  # Gradio stopped writing at the quota: it did not write all 60
        assert upload_files(tmp_path / "gradio") == [] and ledger.total_bytes() == 0
        assert upload(client, "one.png", files[0][1][1]).status_code == 200  # nothing counted against it
    finally:
        blocks.close()


def test_parallel_uploads_of_one_session_keep_to_its_count(tmp_path, monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    client, blocks, ledger = tiny_upload_page(tmp_path, monkeypatch, uploads_per_session=5)
    try:
        pictures = [png_bytes(np.full((4, 4, 3), i, dtype=np.uint8)) for i in range(20)]
        with ThreadPoolExecutor(20) as pool:
            codes = list(pool.map(lambda i: upload(client, f"q{i}.png", pictures[i]).status_code, range(20)))
        assert codes.count(200) == 5 and set(codes) == {200, 429}
        assert len(upload_files(tmp_path / "gradio")) == 5 and len(ledger.files) == 5
    finally:
        blocks.close()


def test_a_body_nested_past_the_limit_is_refused_before_anything_parses_it(tmp_path, caplog):
    from explorer.serve.json_body import json_depth

    assert json_depth(b'{"a": [1, "[[[[", {"b": "\\"[["}], "c": "\\\\"}') == 3  # brackets in strings do not count
    assert json_depth(b"[" * 500 + b"]" * 500) == 500
    with gr.Blocks() as blocks:
        box = gr.Textbox()
        gr.Button().click(lambda text: text, inputs=box, outputs=box)
    client = serve_tiny(Access(roots=(tmp_path,), public=True), blocks)
    try:
        nested = '{"data": ' + "[" * 500 + "]" * 500 + ', "fn_index": 0, "session_hash": "abc"}'
        with caplog.at_level("WARNING"):
            reply = client.post("/gradio_api/queue/join", content=nested, headers={"content-type": "application/json"})
        assert reply.status_code == 400 and "nested 501 levels deep" in reply.text
        assert not [r for r in caplog.records if r.exc_info]
        flat = client.post("/gradio_api/queue/join", json={"data": [[["x"]]], "fn_index": 0, "session_hash": "abc"})
        assert flat.status_code == 200
    finally:
        blocks.close()


def test_gradios_cache_is_pruned_by_age_and_bytes_but_never_a_held_upload(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from explorer.serve.budget import MB
    from explorer.serve.gradio_cache import CachePruner

    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path))  # the app's cache folder: nobody else's
    names = []
    for i in range(5):  # five outputs of 1 MB, in Gradio's layout (a folder per content hash), oldest first
        path = tmp_path / f"hash{i}" / "maps.png"
        path.parent.mkdir()
        path.write_bytes(os.urandom(MB))
        names.append(str(path))
        time.sleep(0.01)
    blocks = SimpleNamespace(temp_file_sets=[set(names)], blocks={})
    held = {Path(names[0]).parent}  # a session's upload: kept whatever its age
    pruner = CachePruner(blocks, replace_budget(cache_bytes=int(2.5 * MB), cache_seconds=3600), lambda: held)
    assert pruner.prune(now=time.time()) == []  # all fresh: a browser has yet to fetch them
    removed = pruner.prune(now=time.time() + 120)
    assert removed == [Path(names[1]).parent, Path(names[2]).parent]  # the oldest past 2.5 MB, not the held one
    assert [Path(n).exists() for n in names] == [True, False, False, True, True]
    assert not Path(names[1]).parent.exists()  # Gradio's folder went too
    (tmp_path / "tmpleaked").touch()  # what gr.File(type="filepath") leaves on every call
    pruner.prune(now=time.time() + 4000)  # past the hour: all but the held one, and the leaked empty file
    assert [Path(n).exists() for n in names] == [True, False, False, False, False]
    assert not (tmp_path / "tmpleaked").exists()
    pruner.clear()  # shutdown: everything the app wrote
    assert not any(tmp_path.iterdir()) and blocks.temp_file_sets == [set()]
    assert pruner.prune(now=time.time() + 120) == []


def replace_budget(**fields) -> Budget:
    from dataclasses import replace

    return replace(PUBLIC, **fields)


def test_the_owners_page_takes_safetensors_but_no_pickle(tmp_path, monkeypatch):
    from safetensors.torch import save

    import torch

    monkeypatch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "gradio"))
    with gr.Blocks() as blocks:
        gr.File()
    client = serve_tiny(Access(roots=(tmp_path,)), blocks)
    try:
        weights = save({"w": torch.zeros(2)})
        assert upload(client, "model.safetensors", weights).status_code == 200
        buffer = io.BytesIO()
        torch.save({"w": torch.zeros(2)}, buffer)
        refused = upload(client, "model.pt", buffer.getvalue())
        assert refused.status_code == 415 and ".safetensors" in refused.text
    finally:
        blocks.close()


def test_no_link_is_fetched_in_any_mode(tmp_path, monkeypatch):
    """A file input given as a URL: refused in front of Gradio, and Gradio's own fetch is refused too; no
    socket ever connects to a non-loopback address."""
    from gradio import processing_utils

    outbound = []
    connect = socket.socket.connect

    def watched(self, address):
        host = address[0] if isinstance(address, tuple) else ""
        if host and not host.startswith("127.") and host not in ("::1", "localhost"):
            outbound.append(address)
            raise ConnectionRefusedError("the test forbids outbound connections")
        return connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", watched)
    link = {"path": "http://93.184.216.34/picture.png", "url": "http://93.184.216.34/picture.png",
            "orig_name": "picture.png", "meta": {"_type": "gradio.FileData"}}
    for public in (True, False):
        with gr.Blocks() as blocks:
            file = gr.File(type="filepath")
            gr.Button().click(lambda path: str(path), inputs=file, outputs=gr.Textbox(), api_name="read")
        client = serve_tiny(Access(roots=(tmp_path,), public=public), blocks)
        try:
            reply = client.post("/gradio_api/queue/join", json={"data": [link], "fn_index": 0,
                                                                 "session_hash": uuid.uuid4().hex})
            assert reply.status_code == 403 and "does not fetch links" in reply.text
        finally:
            blocks.close()
    with pytest.raises(gr.Error, match="does not fetch links"):  # the last line, behind the guard
        processing_utils.ssrf_protected_download("http://93.184.216.34/picture.png", str(tmp_path))
    assert outbound == []


def test_no_run_history_is_kept_or_served_in_any_mode(tmp_path):
    """Gradio's run history is off: the page's config tells the browser to record nothing (it kept every
    event's inputs and outputs in localStorage, rewritten on every status message), and neither its page nor
    its route that saves runs to a Hugging Face bucket exists."""
    for public in (True, False):
        with gr.Blocks() as blocks:
            gr.Button().click(lambda: "done", outputs=gr.Textbox(), api_name="read")
        client = serve_tiny(Access(roots=(tmp_path,), public=public), blocks)
        try:
            assert client.get("/config").json()["run_history"] is False
            assert client.get("/gradio_api/runs").status_code == 404
            connect = client.post("/gradio_api/run-history/connect", json={"bucket_id": "someone/bucket"})
            assert connect.status_code in (404, 405), connect.text
        finally:
            blocks.close()


def test_a_request_body_past_the_budget_is_refused_before_it_is_parsed(tmp_path):
    with gr.Blocks() as blocks:
        box = gr.Textbox()
        gr.Button().click(lambda text: text, inputs=box, outputs=box)
    client = serve_tiny(Access(roots=(tmp_path,), public=True), blocks)
    try:
        reply = client.post("/gradio_api/queue/join", content=b" " * (PUBLIC.request_bytes + 1),
                            headers={"content-type": "application/json"})
        assert reply.status_code == 413 and "at most 1,048,576" in reply.text
        chunks = (b" " * 2**16 for _ in range(PUBLIC.request_bytes // 2**16 + 2))  # no content-length
        streamed = client.post("/gradio_api/queue/join", content=chunks, headers={"content-type": "application/json"})
        assert streamed.status_code == 413 and "more than 1,048,576" in streamed.text
        form = client.post("/gradio_api/process_recording", files={"files": ("a.wav", b"RIFF")})
        assert form.status_code == 403  # multipart anywhere but the upload route
    finally:
        blocks.close()


# ---- exports and folders ------------------------------------------------------------------------------


def test_public_exports_are_capped_and_no_call_leaves_an_empty_folder(tmp_path, monkeypatch):
    from dataclasses import replace

    from explorer.ui import view_controls

    monkeypatch.setattr(view_controls, "EXPORT_ROOT", tmp_path / "exports")
    budget = replace(PUBLIC, export_bytes=2500)
    for i in range(4):
        with view_controls.export_folder(budget) as folder:
            (folder / "figure.png").write_bytes(b"x" * 1000)
        time.sleep(0.02)
    kept = sorted((tmp_path / "exports").iterdir())
    assert len(kept) == 2 and sum(f.stat().st_size for p in kept for f in p.iterdir()) <= 2500
    with pytest.raises(RuntimeError):
        with view_controls.export_folder(budget):
            raise RuntimeError("the figure failed")
    with view_controls.export_folder(budget):
        pass  # wrote nothing
    assert sorted((tmp_path / "exports").iterdir()) == kept
    os.utime(kept[0], (0, 0))  # older than the hour: removed by the next export whatever the bytes
    with view_controls.export_folder(replace(budget, export_bytes=None)) as folder:
        (folder / "figure.png").write_bytes(b"x")
    assert not kept[0].exists() and kept[1].exists()


def test_generate_without_sdxl_leaves_no_folder(tmp_path, monkeypatch):
    from explorer.ui import generation_tab, view_controls

    monkeypatch.setattr(view_controls, "EXPORT_ROOT", tmp_path / "exports")
    access = Access(roots=(tmp_path,))
    key, status, _ = generation_tab.generate(access, None, None, str(tmp_path / "no-sdxl"), "", "A red circle.", "",
                                             [], True, "0", 2, 64, 5.0, "penultimate", False, "", "fp32", False,
                                             False, False)
    assert key is None and "Cannot do that" in status
    assert not (tmp_path / "exports").exists() or not any((tmp_path / "exports").iterdir())


# ---- no server paths on a public page ---------------------------------------------------------------


def test_public_texts_name_files_not_server_folders():
    from explorer.serve.request_rules import scrub_paths

    assert scrub_paths("no dataset at /root/.cache/explorer/datasets/urban1k: the path does not exist") == \
        "no dataset at urban1k: the path does not exist"
    assert scrub_paths(["Wrote `/tmp/a/b/maps.png`.", {"x": "(/srv/x/y.txt)"}]) == ["Wrote `maps.png`.", {"x": "(y.txt)"}]
    for kept in ("77 / 248 tokens", "km/h and 1/2/3", "http://127.0.0.1:7860/gradio_api/file=/tmp/x/y.png"):
        assert scrub_paths(kept) == kept
    # a picture inlined in the maps board: its base64 has "+/" runs that look like paths, and stays whole
    board = '<img src="data:image/webp;base64,UklGR+/9k/ab+/cd/x==">, read from /srv/data/scene.png'
    assert scrub_paths(board) == '<img src="data:image/webp;base64,UklGR+/9k/ab+/cd/x==">, read from scene.png'


def test_a_split_is_a_plain_name_of_the_layouts_own(tmp_path):
    from explorer.data.errors import DatasetError
    from explorer.data.grounding_sets import read_grounding_set
    from explorer.data.retrieval_sets import read_retrieval_set

    for split in ("../../etc/hostname", "/etc/passwd", "a/b", "x" * 40):
        with pytest.raises(DatasetError, match="a split is a plain name"):
            read_grounding_set(tmp_path, split=split)
        with pytest.raises(DatasetError, match="a split is a plain name"):
            read_retrieval_set(tmp_path, split=split)
    flickr = tmp_path / "flickr"  # a plain name, but not one of the layout's: its file is never opened
    for folder in ("Sentences", "Annotations"):
        (flickr / folder).mkdir(parents=True)
    (flickr / "hostname.txt").write_text("1000092795\n")
    with pytest.raises(DatasetError, match="has splits test, val, train, not 'hostname'"):
        read_grounding_set(flickr, split="hostname")


def test_the_public_pages_config_names_no_server_folder(tmp_path, monkeypatch):
    """The dataset pickers offer names: ``/config`` (what any visitor reads) holds no server path."""
    from explorer.data import write_dataset
    from explorer.ui.app import build_app
    from explorer.zoo import Zoo

    home = tmp_path / "home"
    monkeypatch.setenv("EXPLORER_HOME", str(home))
    write_dataset(home / "datasets" / "tiny-world", 12, seed=0, image_size=64)
    access = Access.for_app(tmp_path / "zoo", public=True)
    config = str(build_app(Zoo(tmp_path / "zoo"), access=access).get_config_file())
    assert "tiny-world" in config  # offered...
    assert str(home) not in config and str(tmp_path) not in config  # ...by its name only


def test_the_caption_cap_is_settable_from_the_command_line(monkeypatch, tmp_path):
    from explorer import cli
    from explorer.ui import app as app_module

    seen = {}
    monkeypatch.setattr(app_module, "launch", lambda **kwargs: seen.update(kwargs))
    monkeypatch.setenv("EXPLORER_HOME", str(tmp_path / "home"))
    zoo = ["--checkpoints", str(tmp_path / "zoo")]
    assert cli.main(["app", *zoo, "--public", "--max-caption-chars", "5000"]) == 0
    assert seen["access"].budget.caption_chars == 5000 and seen["access"].budget.sentences_per_draw == 64
    assert cli.main(["app", *zoo]) == 0
    assert seen["access"].budget.caption_chars == 200_000
    assert cli.main(["app", *zoo, "--max-caption-chars", "0"]) == 2


def test_sessions_take_turns_in_a_busy_group():
    """One visitor's many queued requests do not hold another visitor's first one behind all of them."""
    from types import SimpleNamespace

    from explorer.serve.queue_guard import take_turns

    def event(session):
        return SimpleNamespace(session_hash=session, concurrency_id="g")

    running = event("abuser")
    waiting = [event("abuser"), event("abuser"), event("abuser"), event("visitor"), event("abuser")]
    queue = SimpleNamespace(event_ids_to_events={str(i): e for i, e in enumerate([running, *waiting])})
    take_turns(queue, waiting)
    assert [e.session_hash for e in waiting] == ["visitor", "abuser", "abuser", "abuser", "abuser"]
