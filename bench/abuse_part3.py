"""Issue 57's four holes against ``python app.py --public``, over HTTP, before and after (``--app-root`` of an
older checkout for "before"), with bench/abuse.py's server and visitors:

    python bench/abuse_part3.py [--app-root DIR] [--only caption-freeze,upload-monopoly,palette-bomb,two-servers]

- caption-freeze: six token summaries of adversarial captions ("a" + 19,998 spaces + "b", "St. A " * 3333,
  40,000 characters; they reach the splitter as the caption's budget line) from one address while another
  address's GET /config and Draw are timed: the victim's latency ratio against quiet, the log's growth.
- upload-monopoly: one address mints sessions (a page load each) and uploads 20 tiny PNGs in each until refused;
  then another address uploads one: what each got, the upload folder's growth.
- palette-bomb: a 62 KB palette PNG (8000 x 8000, colour type 3 with tRNS) and a 1-bit one, described and drawn
  four at a time from one address: the resident peak (``VmHWM``) against the idle resident.
- two-servers: two pages on one ``GRADIO_TEMP_DIR``; the first stops; the second's Draw on its default example
  (the cached path its page hands back, as a browser does): its answer, and the temp folder left.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
from abuse import ABUSIVE, GB, ORDINARY, ROOT, Server, Visitor, log_growth, outcome, pixel_png  # noqa: E402


def caption_freeze(server: Server, requests: int = 6) -> dict:
    victim = Visitor(server.url, ORDINARY)
    victim.call("draw_maps")  # warm

    def victim_times():
        started = time.perf_counter()
        httpx.get(server.url + "/config", timeout=600)
        config = time.perf_counter() - started
        return config, victim.call("draw_maps", grounding_caption=f"A red circle {time.time()}. A blue ring.")[0]

    quiet = victim_times()
    captions = ["a" + " " * 19_998 + "b", "St. A " * 3333, "a" + " " * 39_998 + "b"] * (requests // 3)

    def work():
        with ThreadPoolExecutor(len(captions) + 1) as pool:
            sent = [pool.submit(Visitor(server.url, ABUSIVE).call, "safe_budget", grounding_caption=c)
                    for c in captions]
            time.sleep(0.5)
            loaded = victim_times()
            answers = [outcome(f.result()[1]) + f" ({f.result()[0]:.1f} s)" for f in sent]
        return {"victim quiet (config s, Draw s)": [round(v, 2) for v in quiet],
                "victim under the captions": [round(v, 2) for v in loaded],
                "Draw ratio": round(loaded[1] / quiet[1], 2), "config ratio": round(loaded[0] / max(quiet[0], 1e-3), 1),
                "abuser's answers": answers}

    return log_growth(server, work)


def upload_monopoly(server: Server, sessions: int = 110, per_session: int = 20) -> dict:
    before = server.disk(server.uploads)
    taken, refused, first_refusal = 0, 0, ""
    for s in range(sessions):
        abuser = Visitor(server.url, ABUSIVE)
        for i in range(per_session):
            reply = abuser.upload(f"p{s}-{i}.png", pixel_png(s * per_session + i))
            if isinstance(reply, str):
                refused += 1
                first_refusal = first_refusal or reply[:120]
                break
            taken += 1
        if refused >= 3:
            break
    victim = Visitor(server.url, ORDINARY)
    reply = victim.upload("mine.png", pixel_png(999_999))
    return {"abuser's uploads taken": taken, "abuser refused": first_refusal,
            "victim's upload": "ok" if isinstance(reply, dict) else reply[:120],
            "upload folder growth bytes": server.disk(server.uploads) - before}


def palette_png(side: int, one_bit: bool = False) -> bytes:
    buffer = io.BytesIO()
    if one_bit:
        Image.new("1", (side, side), 1).save(buffer, format="PNG", optimize=True)
    else:
        picture = Image.new("P", (side, side), 0)
        picture.putpalette([255, 0, 0, 0, 0, 255] + [0] * 762)
        picture.save(buffer, format="PNG", transparency=0, optimize=True)
    return buffer.getvalue()


def palette_bomb(server: Server, side: int = 8000) -> dict:
    found = {}
    for name, data in (("palette with tRNS", palette_png(side)), ("1-bit", palette_png(side, one_bit=True))):
        visitor = Visitor(server.url, ABUSIVE)
        picture = visitor.upload(f"{name[:3]}.png", data)
        if isinstance(picture, str):
            found[name] = {"upload": picture[:100]}
            continue
        calls = [("describe", {"grounding_image": picture}), ("draw_maps", {"grounding_image": picture})] * 2
        idle = server.status("VmRSS")
        server.reset_peak()
        with ThreadPoolExecutor(len(calls)) as pool:
            replies = list(pool.map(lambda call: Visitor(server.url, ABUSIVE).call(call[0], **call[1]), calls))
        found[name] = {"file KB": len(data) // 1024, "resident before GB": round(idle / GB, 2),
                       "resident peak GB": round(server.status("VmHWM") / GB, 2),
                       "added GB": round((server.status("VmHWM") - idle) / GB, 2),
                       "answers": [outcome(r) for _, r in replies]}
    return found


def two_servers(app_root: Path, work: Path) -> dict:
    """Two pages whose Gradio temp folders are one folder (the second's is a link to the first's)."""
    for name in ("one", "two"):
        (work / name).mkdir()
    first = Server(app_root, work / "one")
    (work / "two" / "gradio").symlink_to(first.uploads, target_is_directory=True)
    second = Server(app_root, work / "two")
    try:
        visitor = Visitor(second.url)
        first.stop()  # its cleanup runs (SIGTERM: as a service manager stops it)
        time.sleep(2)
        seconds, reply = visitor.call("draw_maps")  # the page's default example: the cached path it hands back
        return {"second page's Draw after the first stopped": f"{outcome(reply)} ({seconds:.1f} s)",
                "reply": reply[:160] if outcome(reply) != "ok" else "",
                "temp folder entries left": sorted(p.name for p in first.uploads.iterdir())[:6]}
    finally:
        first.stop()
        second.stop()


SCENARIOS = {"caption-freeze": caption_freeze, "upload-monopoly": upload_monopoly, "palette-bomb": palette_bomb}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--app-root", type=Path, default=ROOT)
    parser.add_argument("--only", default="caption-freeze,upload-monopoly,palette-bomb,two-servers")
    args = parser.parse_args()
    root = args.app_root.resolve()
    for name in args.only.split(","):
        with tempfile.TemporaryDirectory(prefix="abuse57-") as folder:
            if name == "two-servers":
                result = two_servers(root, Path(folder))
            else:
                server = Server(root, Path(folder))
                try:
                    result = SCENARIOS[name](server)
                finally:
                    server.stop()
            print(name, json.dumps(result, indent=1), flush=True)


if __name__ == "__main__":
    main()
