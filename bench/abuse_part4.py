"""Issue 64's holes against ``python app.py --public``, over HTTP, before and after (``--app-root`` of an older
checkout for "before"), with bench/abuse.py's server and visitors; and the metadata peaks in this process:

    python bench/abuse_part4.py [--app-root DIR] [--only state,log,upload-stall,metadata] [--sessions N]

- state: one address sends N Draws (the page's default example), each under an invented session hash, then idles:
  the server's resident memory per session and at the end, against the ledger's caps (32 sessions and 256 MB an
  address, 1 GB the page); a second address's Draw still answers.
- log: 300 requests from one address with a value Gradio's checks refuse (the swap panel's sentence number sent as
  the string "1"):
  the server log's growth in lines and tracebacks, and so lines a minute under the flood.
- upload-stall: another address's GET /config timed while one address uploads four 10 MB TIFFs whose 40 tags all
  point at one 10 MB blob (the check opened them on the event loop: +703 MB each, and every request waited).
- upload-stall-page: the same against a small page in this process, the check as it was (Pillow, on the event
  loop) and as it is (counted first, in a thread): the full app's figures swing with the machine's load.
- metadata (in this process, no server): per format, Pillow's peak opening the file and turning it upright (as the
  page's decode does, ``tracemalloc``), against the upload check's peak and verdict (``picture_metadata``).
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
import time
import tracemalloc
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from abuse import ABUSIVE, ORDINARY, ROOT, Server, Visitor, log_growth, outcome  # noqa: E402
import picture_bombs_fixtures as bombs  # noqa: E402

MB = 2**20


def state(server: Server, sessions: int = 60) -> dict:
    """``sessions`` Draws from one address, each in a session hash of its own (a client invents them)."""
    abuser = Visitor(server.url, ABUSIVE)
    abuser.call("draw_maps")  # warm: the models, the caches
    start = server.status("VmRSS")
    growth = []
    for i in range(sessions):
        abuser.session = uuid.uuid4().hex
        seconds, reply = abuser.call("draw_maps")
        if i % 10 == 9:
            growth.append(round((server.status("VmRSS") - start) / MB))
    victim = Visitor(server.url, ORDINARY)
    seconds, reply = victim.call("draw_maps")
    end = server.status("VmRSS")
    return {"sessions": sessions, "resident growth MB every 10": growth,
            "resident growth MB": round((end - start) / MB), "MB a session": round((end - start) / MB / sessions, 2),
            "another address's Draw": f"{outcome(reply)} ({seconds:.1f} s)"}


def log_flood(server: Server, requests: int = 300) -> dict:
    visitor = Visitor(server.url, ABUSIVE)
    event = visitor.events["swap_sentence"]
    kinds = {c_id: visitor.components[c_id].get("type") for c_id in event["inputs"]}

    def work():
        started = time.perf_counter()
        answers = {}
        for _ in range(requests):
            data = visitor.inputs("swap_sentence")
            data = ["1" if kinds[c_id] == "number" else value for c_id, value in zip(event["inputs"], data)]
            body = {"data": data, "fn_index": event["id"], "session_hash": visitor.session}
            joined = visitor.http.post("/gradio_api/queue/join", json=body)
            last = ""
            if joined.status_code == 200:
                with visitor.http.stream("GET", "/gradio_api/queue/data",
                                         params={"session_hash": visitor.session}) as stream:
                    for line in stream.iter_lines():
                        if line.startswith("data:") and '"process_completed"' in line:
                            last = line[5:]
                            break
            word = outcome(last.strip()) if last else f"HTTP {joined.status_code}"
            answers[word[:60]] = answers.get(word[:60], 0) + 1
        return {"requests": requests, "seconds": round(time.perf_counter() - started, 1), "answers": answers}

    result = log_growth(server, work)
    result["log lines a minute"] = round(result["log lines"] / max(result["seconds"], 1e-3) * 60)
    return result


def upload_stall(server: Server, uploads: int = 4, tags: int = 40, blob: int = 10 * MB) -> dict:
    bomb = bombs.tiff_bomb(tags, blob)
    victim = httpx.Client(base_url=server.url, timeout=600,
                          transport=httpx.HTTPTransport(local_address=ORDINARY))
    victim.get("/config")

    def config_seconds() -> float:
        started = time.perf_counter()
        victim.get("/config")
        return time.perf_counter() - started

    quiet = config_seconds()
    server.reset_peak()
    idle = server.status("VmRSS")

    def send(i: int):
        http = httpx.Client(base_url=server.url, timeout=600, transport=httpx.HTTPTransport(local_address=ABUSIVE))
        http.get("/")
        reply = http.post("/gradio_api/upload", files={"files": (f"bomb{i}.tif", bomb)})
        return reply.status_code

    with ThreadPoolExecutor(uploads) as pool:
        sent = [pool.submit(send, i) for i in range(uploads)]
        time.sleep(0.3)
        loaded = []
        while not all(f.done() for f in sent):
            loaded.append(config_seconds())
            time.sleep(0.2)
        codes = [f.result() for f in sent]
    return {"file MB": round(len(bomb) / MB, 1), "uploads": codes, "victim GET /config quiet s": round(quiet, 3),
            "victim GET /config during, worst s": round(max(loaded or [0.0]), 2),
            "victim samples": len(loaded), "resident peak over idle MB": round((server.status("VmHWM") - idle) / MB)}


def upload_stall_page(uploads: int = 4, tags: int = 40, blob: int = 10 * MB) -> dict:
    """The same, against a small public page in this process (the full app's figures swing with the machine's
    load): the check as it was (Pillow opening the file, on the event loop) and as it is (the metadata counted
    first, in a thread). "As it was" is this checkout with its check put back on the loop and its metadata
    count taken out, so both columns share everything else."""
    import asyncio
    import socket
    import threading

    import gradio as gr

    from explorer.serve import page_guard, picture_metadata
    from explorer.serve.access import Access
    from explorer.serve.budget import PUBLIC
    from explorer.serve.startup import start_page
    from explorer.ui.app import page_options, serve

    bomb = bombs.tiff_bomb(tags, blob)
    out = {}
    for mode in ("as it was", "as it is"):
        threaded, counted = asyncio.to_thread, picture_metadata.check
        if mode == "as it was":
            async def on_the_loop(work, *args):
                return work(*args)

            page_guard.asyncio.to_thread, picture_metadata.check = on_the_loop, lambda path: None
        try:
            with gr.Blocks() as blocks:
                gr.Image()
            access = Access(roots=(ROOT,), public=True, budget=PUBLIC)
            serve(blocks, access)
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
            start_page(blocks, server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
                       **page_options(access))
            url = f"http://127.0.0.1:{port}"
            victim = httpx.Client(base_url=url, timeout=600, transport=httpx.HTTPTransport(local_address=ORDINARY))
            victim.get("/config")
            codes, worst = [], 0.0

            def send(i: int):
                http = httpx.Client(base_url=url, timeout=600, transport=httpx.HTTPTransport(local_address=ABUSIVE))
                http.get("/")
                codes.append(http.post("/gradio_api/upload", files={"files": (f"b{i}.tif", bomb)}).status_code)

            senders = [threading.Thread(target=send, args=(i,)) for i in range(uploads)]
            for sender in senders:
                sender.start()
            while any(sender.is_alive() for sender in senders):
                started = time.perf_counter()
                victim.get("/config")
                worst = max(worst, time.perf_counter() - started)
                time.sleep(0.1)
            out[mode] = {"uploads": sorted(codes), "victim GET /config worst s": round(worst, 2)}
            blocks.close()
        finally:
            page_guard.asyncio.to_thread, picture_metadata.check = threaded, counted
    return out


def _peak(work) -> tuple[int, str]:
    tracemalloc.start()
    try:
        verdict = work()
    except Exception as error:  # noqa: BLE001 - a refusal is a verdict too
        verdict = type(error).__name__
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak, str(verdict)


def metadata() -> dict:
    """Per format: Pillow's peak opening and turning the file upright (the page's decode before the check), and the
    check's peak and verdict."""
    from PIL import Image, ImageOps

    from explorer.serve.upload_ledger import accepted_file

    files = {"tiff 10 tags x 10 MB": lambda: bombs.tiff_bomb(10, 10 * MB),
             "tiff 40 tags x 10 MB": lambda: bombs.tiff_bomb(40, 10 * MB),
             "png eXIf 40 tags x 10 MB": lambda: bombs.png_exif_bomb(40, 10 * MB),
             "png zTXt 64 x 1 MB": lambda: bombs.png_text_bomb(64),
             "png iTXt 64 x 1 MB": lambda: bombs.png_text_bomb(64, kind=b"iTXt"),
             "png iCCP 1 MB": bombs.png_icc_bomb,
             "jpeg APP1 exif 2000 tags x 40 KB": bombs.jpeg_exif_bomb,
             "jpeg 200 APP2 segments": lambda: bombs.jpeg_appn_bomb(200),
             "webp EXIF 40 tags x 10 MB": lambda: bombs.webp_exif_bomb(40, 10 * MB),
             "gif comment 1 MB": lambda: bombs.gif_comment_bomb(1 * MB)}
    out = {}
    with tempfile.TemporaryDirectory() as folder:
        for name, build in files.items():
            data = build()
            path = Path(folder) / "picture"
            path.write_bytes(data)

            def pillow():
                with Image.open(io.BytesIO(data)) as image:
                    image.load()
                    ImageOps.exif_transpose(image)
                return "opened"

            started = time.perf_counter()
            before, said = _peak(pillow)
            pillow_s = time.perf_counter() - started
            started = time.perf_counter()
            after, verdict = _peak(lambda: "accepted" if accepted_file(path, weights=False) else "refused")
            out[name] = {"file MB": round(len(data) / MB, 2), "Pillow peak MB": round(before / MB, 1),
                         "Pillow s": round(pillow_s, 2), "Pillow": said, "check peak MB": round(after / MB, 1),
                         "check s": round(time.perf_counter() - started, 3), "check": verdict}
    return out


SCENARIOS = {"state": state, "log": log_flood, "upload-stall": upload_stall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--app-root", type=Path, default=ROOT)
    parser.add_argument("--only", default="state,log,upload-stall,metadata")
    parser.add_argument("--sessions", type=int, default=60, help="state: invented sessions, one Draw each")
    args = parser.parse_args()
    root = args.app_root.resolve()
    names = args.only.split(",")
    if "metadata" in names:
        print("metadata", json.dumps(metadata(), indent=1), flush=True)
    if "upload-stall-page" in names:
        print("upload-stall-page", json.dumps(upload_stall_page(), indent=1), flush=True)
    served = [name for name in names if name in SCENARIOS]
    if served:
        with tempfile.TemporaryDirectory(prefix="abuse64-") as folder:
            server = Server(root, Path(folder))
            try:
                for name in served:
                    result = state(server, args.sessions) if name == "state" else SCENARIOS[name](server)
                    print(name, json.dumps(result, indent=1), flush=True)
            finally:
                server.stop()


if __name__ == "__main__":
    main()
