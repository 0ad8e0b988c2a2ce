"""Soak the app as people use it: N browser sessions at once, a fixed mix of requests, for a bounded
time, against 127.0.0.1 only. Prints the web process's resident memory over time, latency
percentiles per request and every failure.

    python bench/soak.py                          # 8 sessions, 4 rounds (at most 600 s)
    python bench/soak.py --sessions 2 --seconds 30 --ci   # CI: exit 1 on any failed request

Each session is its own Gradio client (its own session state, as a browser tab). A round is, per
session: Draw maps with 1-4 demo models (rotating) on a 1024 px picture with a 60-sentence caption
(or a short one), a page change, a colour-map change, a PNG export, FLISM regions and PCA maps.
Memory is sampled every second and at the end of every round (all sessions finished it). Target:
growth under 10 % between the second round and the last, under 4 GB, zero failed requests.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from grounding_latency import picture as photo_like  # noqa: E402

from explorer.core.runtime import resident_gb  # noqa: E402

MODELS = ["demo-caft", "demo-flair", "demo-finelip", "demo-longclip", "demo-goal", "demo-mulclip", "demo-clip-base"]
COLOURS = ["red", "blue", "green", "yellow", "purple", "orange", "white", "black", "grey", "brown"]
SHAPES = ["cube", "ball", "cone", "ring", "star", "disk"]
PLACES = ["on the left", "on the right", "at the top", "at the bottom", "in the centre", "in a corner"]
TARGET_GROWTH, TARGET_GB = 0.10, 4.0
REQUEST_TIMEOUT_S = 300


def long_caption(n: int = 60) -> str:
    return " ".join(f"A {COLOURS[i % 10]} {SHAPES[i % 6]} sits {PLACES[(i // 6) % 6]} of the scene."
                    for i in range(n))


def picture(path: Path, side: int, seed: int) -> Path:
    photo_like(side, seed).save(path)  # the same photo-like picture as the latency benchmark
    return path


def rss_gb(pid: int) -> float:
    found = resident_gb(pid)
    return float("nan") if found is None else found


def page_session(port: int) -> dict:
    """The cookie the page gives a browser that opens it: an upload belongs to a page session."""
    import httpx

    reply = httpx.get(f"http://127.0.0.1:{port}/", timeout=60)
    return {"Cookie": "; ".join(f"{name}={value}" for name, value in reply.cookies.items())}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app(port: int, home: Path, checkpoints: Path) -> subprocess.Popen:
    env = {**os.environ, "EXPLORER_HOME": str(home), "GRADIO_ANALYTICS_ENABLED": "False",
           "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
    log = open(home / "app.log", "w")
    process = subprocess.Popen([sys.executable, str(REPO / "app.py"), "--port", str(port), "--checkpoints",
                                str(checkpoints)], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    deadline = time.time() + 180
    while time.time() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the app exited ({process.returncode}); see {home / 'app.log'}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return process
        except OSError:
            time.sleep(0.5)
    process.kill()
    raise SystemExit("the app did not start within 180 s")


class Recorder:
    def __init__(self):
        self.latency = defaultdict(list)
        self.failures: list[str] = []
        self.lock = threading.Lock()

    def call(self, client, session: int, endpoint: str, *args):
        start = time.perf_counter()
        try:  # a request that hangs is a failure too, not a stalled run
            result = client.submit(*args, api_name=f"/{endpoint}").result(timeout=REQUEST_TIMEOUT_S)
        except Exception as error:  # noqa: BLE001 - every failure is counted and printed
            with self.lock:
                self.failures.append(f"session {session} {endpoint}: {type(error).__name__}: {error}")
            return None
        with self.lock:
            self.latency[endpoint].append(time.perf_counter() - start)
        text = " ".join(str(part) for part in (result if isinstance(result, (list, tuple)) else [result]))
        if "Cannot do that" in text or "Internal error" in text:
            with self.lock:
                self.failures.append(f"session {session} {endpoint}: {text[:300]}")
        return result


def session_round(client, recorder: Recorder, session: int, round_index: int, pictures, captions) -> None:
    from gradio_client import handle_file

    k = 1 + (session + round_index) % 4
    models = [MODELS[(session + round_index + j) % len(MODELS)] for j in range(k)]
    image = handle_file(str(pictures[(session + round_index) % len(pictures)]))
    caption = captions[(session + round_index) % len(captions)]
    common = [image, caption, models, "native", "", None]
    recorder.call(client, session, "draw_maps", *common, "turbo", 0.55, "contour", True, 0.5, "map", 1, 8)
    recorder.call(client, session, "rerender_maps_maps-page", "turbo", 0.55, "contour", True, 0.5, "map", 2, 8)
    recorder.call(client, session, "rerender_maps_maps-cmap", "viridis", 0.55, "contour", True, 0.5, "map", 2, 8)
    recorder.call(client, session, "export_maps", "png", "page", "sans", 0, "sentence", "scores")
    recorder.call(client, session, "find_regions", *common[:2], models[:1], *common[3:], "")
    recorder.call(client, session, "draw_pca", *common[:2], models[:2], *common[3:], [], "features", "joint")


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=600, help="no new round starts after this long")
    parser.add_argument("--side", type=int, default=1024, help="picture side in pixels")
    parser.add_argument("--checkpoints", type=Path, default=REPO / "checkpoints")
    parser.add_argument("--ci", action="store_true", help="exit 1 on any failed request (memory is reported)")
    parser.add_argument("--caches", action="store_true", help="print what every cache of the app holds after each round")
    args = parser.parse_args(argv)

    from gradio_client import Client

    home = Path(tempfile.mkdtemp(prefix="explorer-soak-"))
    pictures = [picture(home / f"picture-{i}.png", args.side, i) for i in range(3)]
    captions = [long_caption(60), long_caption(6)]
    port = free_port()
    app = start_app(port, home, args.checkpoints)
    samples: list[tuple[float, float]] = []
    round_rss: list[float] = []
    stop = threading.Event()
    started = time.time()

    def monitor():
        while not stop.is_set():
            samples.append((time.time() - started, rss_gb(app.pid)))
            stop.wait(1.0)

    recorder = Recorder()
    threading.Thread(target=monitor, daemon=True).start()
    try:
        print(f"soak: {args.sessions} sessions, up to {args.rounds} rounds / {args.seconds:g} s, pictures "
              f"{args.side} px, app pid {app.pid} on 127.0.0.1:{port}; RSS at start {rss_gb(app.pid):.2f} GB")
        clients = [Client(f"http://127.0.0.1:{port}/", verbose=False, download_files=str(home / "downloads"),
                          analytics_enabled=False, headers=page_session(port)) for _ in range(args.sessions)]
        deadline = started + args.seconds
        for round_index in range(args.rounds):
            if time.time() > deadline and round_index > 0:
                break
            threads = [threading.Thread(target=session_round, args=(client, recorder, s, round_index, pictures,
                                                                    captions)) for s, client in enumerate(clients)]
            clock = time.time()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            round_rss.append(rss_gb(app.pid))
            print(f"  round {round_index + 1}: {time.time() - clock:6.1f} s, RSS {round_rss[-1]:.2f} GB, "
                  f"failures so far {len(recorder.failures)}")
            if args.caches:
                report = clients[0].predict(api_name="/memory_report")
                print("    " + str(report).replace("\n", "\n    "))
        time.sleep(2)
        idle = rss_gb(app.pid)
    finally:
        stop.set()
        app.terminate()
        try:
            app.wait(timeout=20)
        except subprocess.TimeoutExpired:
            app.kill()

    peak = max(rss for _, rss in samples) if samples else float("nan")
    print("  RSS over time (every ~10 s): " + ", ".join(f"{t:.0f}s {rss:.2f}" for t, rss in samples[::10]))
    print(f"  RSS peak {peak:.2f} GB, after the last round {round_rss[-1]:.2f} GB, 2 s idle {idle:.2f} GB")
    growth = None
    if len(round_rss) >= 3:
        growth = (round_rss[-1] - round_rss[1]) / round_rss[1]
        print(f"  growth from round 2 to round {len(round_rss)}: {growth * 100:+.1f} %   target < "
              f"{TARGET_GROWTH * 100:.0f} %: {'met' if growth < TARGET_GROWTH else 'NOT met'}")
    print(f"  peak under {TARGET_GB:g} GB: {'met' if peak < TARGET_GB else 'NOT met'}")
    print("  latency per request (s):  n    p50    p90    p99    max")
    for endpoint, values in sorted(recorder.latency.items()):
        print(f"    {endpoint:28s} {len(values):3d} {statistics.median(values):6.2f} {percentile(values, 0.9):6.2f} "
              f"{percentile(values, 0.99):6.2f} {max(values):6.2f}")
    print(f"  failed requests: {len(recorder.failures)}")
    for failure in recorder.failures[:20]:
        print(f"    {failure}")
    if args.ci and recorder.failures:
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
