"""The page as a remote visitor sees it: every endpoint called over HTTP (127.0.0.1 only) with hostile
values, in owner mode and in public mode (``explorer.serve.access``).

A visitor uploads a pickle whose payload creates a marker file, then calls every endpoint the page's
config lists (named or not) with, in every text field and dropdown, the uploaded pickle's server path,
``/etc/passwd``, a private folder outside the allowed roots, a ``..`` path and a symlink that both lead
there, every checkbox ticked, and every file input pointing at the same places. What must hold:
nothing is unpickled (the marker never appears), no file under the private folder is opened or
listed (an audit hook watches the server, which runs in this process), no private caption or
``/etc/passwd`` line comes back, Gradio serves none of them, and in public mode the zoo, the run store
and the datasets are unchanged.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import uuid
from pathlib import Path

import httpx
import pytest
import torch
from PIL import Image

from explorer.serve.startup import start_page
from page_fixtures import loopback_http

pytestmark = pytest.mark.slow(reason="serves the whole page in owner and public mode and calls its every endpoint")

CANARY = "PRIVATE-CANARY-5d1e"
PASSWD_LINE = "root:x:0:0"
REPO = Path(__file__).resolve().parents[1]


class Payload:
    """Unpickling this creates the marker folder (what an attacker's code would do)."""

    marker = ""

    def __reduce__(self):
        return os.mkdir, (self.marker,)


# ---- the server's file accesses, seen by an audit hook ------------------------------------------------

WATCH = {"on": False, "prefixes": (), "hits": []}


def _audit(event, args):
    if not WATCH["on"] or event not in ("open", "os.listdir", "os.scandir") or not args:
        return
    target = args[0]
    if isinstance(target, (str, bytes, os.PathLike)):
        text = os.fsdecode(target)
        if any(text == prefix or text.startswith(prefix + os.sep) for prefix in WATCH["prefixes"]):
            WATCH["hits"].append((event, text))


sys.addaudithook(_audit)  # audit hooks cannot be removed: this one does nothing unless WATCH["on"]


# ---- a world with a private folder, a pickle and roots ---------------------------------------------


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from explorer.views.retrieval_view import ensure_synthetic

    base = tmp_path_factory.mktemp("visitor")
    home, zoo, private = base / "home", base / "zoo", base / "private"
    for folder in (home, zoo, private):
        folder.mkdir()
    copy_zoo(zoo)
    # A dataset the visitor must never see: a picture with a caption, and a pickle beside it.
    Image.new("RGB", (32, 32), (200, 10, 10)).save(private / "secret.png")
    (private / "secret.txt").write_text(f"{CANARY} a red square nobody may read.")
    marker = base / "PWNED"
    Payload.marker = str(marker)
    evil = base / "evil.pt"
    torch.save({"state_dict": {"w": torch.zeros(1)}, "payload": Payload()}, evil)
    (private / "evil.pt").write_bytes(evil.read_bytes())
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EXPLORER_HOME", str(home))
        patch.setenv("GRADIO_TEMP_DIR", str(base / "gradio"))  # this module's own uploads, nobody else's
        patch.delenv("EXPLORER_ALLOWED_ROOTS", raising=False)
        # Gradio's queue rebuilds a pandas summary of every event so far after each event (its monitoring
        # statistics, which nothing here reads): over ~750 calls that was more than a third of the time.
        patch.setenv("GRADIO_ANALYTICS_CACHE_FREQUENCY", str(10**9))
        ensure_synthetic()  # the listed dataset exists before anything is compared
        (home / "shortcut").symlink_to(private, target_is_directory=True)  # inside a root, leads out
        yield dict(base=base, home=home, zoo=zoo, private=private, marker=marker, evil=evil)


def copy_zoo(folder: Path) -> None:
    """The repository's manifests, pointing at the same weights (absolute paths)."""
    from explorer.zoo import Manifest, Zoo

    for manifest in Zoo(REPO / "checkpoints").manifests():
        copy = Manifest(**{**{k: v for k, v in vars(manifest).items() if k != "path"},
                           "weights": manifest.display_weights(), "options": manifest.resolved_options()})
        copy.write(folder / f"{manifest.name}.json")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve_page(world, public: bool):
    from explorer.jobs import JobManager
    from explorer.serve.access import Access
    from explorer.ui.app import build_app, page_options, serve
    from explorer.zoo import Zoo

    access = Access.for_app(world["zoo"], public=public)
    jobs = None if public else JobManager(zoo_root=world["zoo"], gpu_ids=[], max_running=1)
    app = serve(build_app(Zoo(world["zoo"]), jobs=jobs, access=access), access)
    port = free_port()
    start_page(app, server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
               **page_options(access))
    return app, f"http://127.0.0.1:{port}"


# ---- a visitor: plain HTTP, as Gradio's own page speaks it ---------------------------------------------


class Visitor:
    def __init__(self, url: str):
        self.url, self.http = url, loopback_http(url, timeout=120)
        self.http.get("/")  # the page first, as a browser: it opens the session an upload belongs to
        self.config = self.http.get("/config").json()
        self.components = {c["id"]: c for c in self.config["components"]}
        # One session for all of this visitor's calls, as a browser tab has: Gradio builds a new session's
        # state from every block's config (~0.1 s on this page), which per call was over 40 % of the sweep.
        self.session = uuid.uuid4().hex

    def upload(self, path: Path) -> httpx.Response:
        with open(path, "rb") as handle:
            return self.http.post("/gradio_api/upload", files={"files": (path.name, handle)})

    def call(self, fn_index: int, data: list) -> str:
        """The whole reply stream of one call, as text (outputs or the error)."""
        session = self.session
        joined = self.http.post("/gradio_api/queue/join", json={"data": data, "fn_index": fn_index,
                                                                "session_hash": session, "event_data": None,
                                                                "trigger_id": None})
        if joined.status_code != 200:
            return joined.text
        seen = []
        with self.http.stream("GET", "/gradio_api/queue/data", params={"session_hash": session}) as stream:
            for line in stream.iter_lines():
                if not line.startswith("data:"):
                    continue
                seen.append(line)
                message = json.loads(line[5:])
                if message.get("msg") in ("process_completed", "close_stream", "unexpected_error"):
                    break
        return "\n".join(seen)

    def value(self, component_id: int, text: str, file: dict, hostile_choices: bool):
        """A hostile value for this input: the text in every text field, every box ticked, the file. A
        list (dropdown, radio) gets the text too when ``hostile_choices`` (Gradio refuses a value that is not
        a choice before any handler runs), else its first choice, so that the handler's own checks are
        what the other fields meet."""
        component = self.components[component_id]
        kind, props = component["type"], component.get("props", {})
        if kind == "state":
            return None
        if kind == "checkbox":
            return True
        if kind == "file":
            return [file] if props.get("file_count") == "multiple" else file
        if kind in ("number", "slider"):
            return 1
        if kind in ("dropdown", "radio") and not hostile_choices and not props.get("allow_custom_value"):
            choices = [c[1] if isinstance(c, (list, tuple)) else c for c in props.get("choices") or []]
            first = choices[0] if choices else None
            return ([first] if first is not None else []) if props.get("multiselect") else first
        if kind == "dropdown" and props.get("multiselect"):
            return [text]
        if kind in ("textbox", "dropdown", "radio"):
            return text
        return None


def file_data(path: str) -> dict:
    return {"path": path, "orig_name": Path(path).name, "meta": {"_type": "gradio.FileData"}}


def hostile_values(world, pickle_on_server: str) -> dict[str, tuple[str, dict]]:
    """name -> (text for every text field, file for every file input)."""
    private = world["private"]
    dotdot = f"{world['zoo']}/../private"  # starts inside a root, leads out
    return {"pickle": (pickle_on_server, file_data(pickle_on_server)),
            "passwd": ("/etc/passwd", file_data("/etc/passwd")),
            "private": (str(private), file_data(str(private / "secret.png"))),
            "dotdot": (dotdot, file_data(f"{dotdot}/secret.png")),
            "symlink": (str(world["home"] / "shortcut"), file_data(str(world["home"] / "shortcut" / "secret.png")))}


def strict_choices(visitor: Visitor, dependency: dict) -> bool:
    """Whether an input of this endpoint takes only its listed choices (a dropdown or radio without custom values)."""
    return any(visitor.components[i]["type"] in ("dropdown", "radio")
               and not visitor.components[i].get("props", {}).get("allow_custom_value") for i in dependency["inputs"])


def takes(visitor: Visitor, dependency: dict, kind: str) -> bool:
    return any(visitor.components[i]["type"] == kind for i in dependency["inputs"])


# What Gradio answers when it refuses a value before any handler runs (our line for it on a public page).
BEFORE_HANDLER = ("is not in the list of choices", "was not uploaded by a user", "could not read this request")


def planned_calls(visitor: Visitor, world, pickle_on_server: str) -> list[tuple[dict, list, bool]]:
    """Every endpoint, called once per class of hostile value; a class is the code that meets the value first.
    - A value in a choice-only input (dropdown or radio without custom values): Gradio's choice check refuses it
      before any handler runs, whatever it holds, so one call (with one of the five values, taken in turn).
    - Listed choices and a file input: Gradio's check of a file that was not uploaded here refuses it before
      the handler, in the same function for every endpoint, so one call with one value taken in turn; each of
      the five still meets that check on several endpoints (more than 15 endpoints take a file).
    - Listed choices and text, no file: the text reaches the endpoint's own handler, so every value, each
      its own class there (a pickle's path, a system file, a private folder, a ``..`` path, a link).
    - An endpoint with no text, file or choice input gets one call.
    Each call comes with whether Gradio refuses it before the handler (the first two classes), which
    ``attack_every_endpoint`` checks in its reply: the classes hold, or the test fails.
    Before issue 65 every endpoint got all five values twice (hostile choices and listed ones): 1,054 calls on
    the owner's page, for the same checks."""
    values = list(hostile_values(world, pickle_on_server).values())
    plan, sent = [], set()
    for n, dependency in enumerate(visitor.config["dependencies"]):
        def data(value, hostile_choices):
            return [visitor.value(i, *value, hostile_choices) for i in dependency["inputs"]]

        turn, file = values[n % len(values)], takes(visitor, dependency, "file")
        calls = [(data(turn, True), True)] if strict_choices(visitor, dependency) else []
        if file:
            calls.append((data(values[(n + 1) % len(values)], False), True))
        else:
            calls += [(data(value, False), False) for value in values]
        for call, before_handler in calls:
            key = (dependency["id"], json.dumps(call, sort_keys=True))
            if key not in sent:  # an endpoint with no text, file or choice input: the calls are alike
                sent.add(key)
                plan.append((dependency, call, before_handler))
    return plan


def attack_every_endpoint(visitor: Visitor, world) -> list[str]:
    refused = visitor.upload(world["evil"])  # the page takes pictures (and, the owner's, .safetensors) only
    assert refused.status_code == 415 and "this is not a picture (PNG, JPEG" in refused.text
    from gradio.utils import get_upload_folder

    assert not list(Path(get_upload_folder()).rglob("evil.pt"))  # refused before it is kept
    pickle_on_server = str(world["evil"])  # so every input is tried with a pickle's path on the server anyway
    dependencies = visitor.config["dependencies"]
    assert len(dependencies) > 40  # the whole page, not a stub
    plan = planned_calls(visitor, world, pickle_on_server)
    assert {dependency["id"] for dependency, _, _ in plan} == {d["id"] for d in dependencies}  # every endpoint
    sent = [json.dumps(call) for _, call, before_handler in plan if not before_handler]
    for text, _ in hostile_values(world, pickle_on_server).values():  # every value reached handlers
        assert sum(json.dumps(text) in call for call in sent) > 10, text
    replies = []
    for dependency, call, before_handler in plan:
        replies.append(visitor.call(dependency["id"], call))
        if before_handler:  # the class it was put in holds: Gradio refused it before the handler
            assert any(words in replies[-1] for words in BEFORE_HANDLER), (dependency.get("api_name"), replies[-1])
    return replies


def snapshot(folder: Path) -> dict:
    if not folder.exists():
        return {}
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))
            if p.is_file()}


def served(visitor: Visitor, path: str) -> int:
    return visitor.http.get(f"/gradio_api/file={path}").status_code


def check_nothing_leaked(visitor: Visitor, world, replies: list[str]) -> None:
    assert not world["marker"].exists(), "the uploaded pickle was unpickled"
    assert WATCH["hits"] == [], f"the server opened or listed private files: {WATCH['hits'][:5]}"
    whole = "\n".join(replies)
    assert CANARY not in whole and PASSWD_LINE not in whole
    for path in ("/etc/passwd", str(world["private"] / "secret.txt"), str(world["private"] / "secret.png"),
                 str(world["home"] / "shortcut" / "secret.txt"), str(world["zoo"] / ".." / "private" / "secret.txt")):
        assert served(visitor, path) == 403, path


@pytest.fixture
def watched(world):
    WATCH.update(on=True, prefixes=(str(world["private"]), str(world["private"].resolve()), "/etc/passwd"), hits=[])
    yield
    WATCH["on"] = False


@pytest.fixture(scope="module")
def owner_url(world):
    """One owner's page for the module's owner tests (issue 65: building the whole page again per test)."""
    app, url = serve_page(world, public=False)
    yield url
    app.close()


# ---- the tests ---------------------------------------------------------------------------------------


def test_owner_page_refuses_every_hostile_value_on_every_endpoint(world, owner_url, watched):
    visitor = Visitor(owner_url)
    names = {d.get("api_name") for d in visitor.config["dependencies"]}
    assert {"zoo_check", "zoo_add", "jobs_submit", "retrieval_index", "generate"} <= names
    replies = attack_every_endpoint(visitor, world)
    check_nothing_leaked(visitor, world, replies)
    whole = "\n".join(replies)
    assert "not under an allowed folder" in whole  # refused for that reason, not by accident
    assert "never unpickles" not in whole or "--allow-pickle" in whole


def test_owner_page_reads_allowed_folders_and_never_unpickles_there(world, owner_url, watched):
    """The positive side: a file under a root is read; a pickle there gets the shell command, not unpickled."""
    import shutil

    allowed = world["home"] / "models"
    allowed.mkdir(exist_ok=True)
    shutil.copyfile(world["evil"], allowed / "evil.pt")
    shutil.copyfile(REPO / "checkpoints" / "demo" / "clip-base.safetensors", allowed / "clip.safetensors")
    visitor = Visitor(owner_url)
    check = next(d for d in visitor.config["dependencies"] if d.get("api_name") == "zoo_check")
    good = visitor.call(check["id"], [str(allowed / "clip.safetensors")])
    assert "safetensors" in good and "Cannot do that" not in good
    pickled = visitor.call(check["id"], [str(allowed / "evil.pt")])
    assert "explorer models add" in pickled and "--allow-pickle" in pickled
    assert not world["marker"].exists()


def test_public_page_changes_nothing_and_shows_nothing_private(world, watched):
    from explorer.core import paths

    app, url = serve_page(world, public=True)
    try:
        visitor = Visitor(url)
        names = {d.get("api_name") for d in visitor.config["dependencies"]}
        assert not names & {"zoo_check", "zoo_add", "zoo_upload", "zoo_remove", "zoo_recheck", "jobs_submit",
                            "jobs_cancel", "jobs_delete", "memory_report"}
        folders = [world["zoo"], paths.home() / "jobs", paths.datasets_dir()]
        before = [snapshot(folder) for folder in folders]
        replies = attack_every_endpoint(visitor, world)
        check_nothing_leaked(visitor, world, replies)
        assert [snapshot(folder) for folder in folders] == before
        whole = "\n".join(replies)
        assert "public demo" in whole  # the handlers' own refusals, not only Gradio's
        # A file input that was not uploaded here is refused by Gradio before any handler; the visitor reads our
        # line, not Gradio's text (which names the server path it refused).
        assert "could not read this request" in whole and "Cannot move" not in whole
        # Direct REST calls skip the queue: closed on a public page.
        assert visitor.http.post("/gradio_api/run/draw_maps", json={"data": []}).status_code == 404
    finally:
        app.close()


def test_a_session_may_hold_only_a_few_requests(world):
    """Gradio's queue refuses the request past the cap, in one line; other sessions still get in."""
    import time

    import gradio as gr

    from explorer.serve.access import Access
    from explorer.ui.app import serve

    with gr.Blocks() as app:
        box = gr.Textbox()
        gr.Button().click(lambda text: time.sleep(1.5) or text, inputs=box, outputs=box, api_name="slow")
    serve(app, Access(roots=(world["home"],), public=True, session_cap=2))
    port = free_port()
    start_page(app, server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        http = loopback_http(f"http://127.0.0.1:{port}", timeout=30)
        fn_index = http.get("/config").json()["dependencies"][0]["id"]

        def join(session):
            return http.post("/gradio_api/queue/join", json={"data": ["x"], "fn_index": fn_index,
                                                             "session_hash": session, "trigger_id": None})

        codes = [join("one").status_code for _ in range(4)]
        assert codes[:2] == [200, 200] and codes[2:] == [503, 503]
        refused = join("one")
        assert "at most 2" in refused.text
        assert join("two").status_code == 200  # another visitor is not held up by the first's cap
        # A request that names no session cannot be counted: refused (the /call route sends none).
        nameless = http.post("/gradio_api/call/slow", json={"data": ["x"]})
        assert nameless.status_code != 200 and "must name its session" in nameless.text
    finally:
        app.close()


def test_the_command_line_makes_shared_pages_public_unless_trusted_with_auth(monkeypatch, tmp_path):
    from explorer import cli
    from explorer.ui import app as app_module

    seen = {}
    monkeypatch.setattr(app_module, "launch", lambda **kwargs: seen.update(kwargs))
    monkeypatch.setenv("EXPLORER_HOME", str(tmp_path / "home"))
    zoo = ["--checkpoints", str(tmp_path / "zoo")]

    def mode(*args):
        seen.clear()
        assert cli.main(["app", *zoo, *args]) == 0
        return seen["access"].public

    assert mode() is False
    assert mode("--public") is True
    assert mode("--host", "0.0.0.0") is True
    assert mode("--share") is True
    assert mode("--host", "0.0.0.0", "--trusted", "--auth", "me:secret") is False
    assert cli.main(["app", *zoo, "--host", "0.0.0.0", "--trusted"]) == 2  # no --auth: refused, said why
    assert cli.main(["app", *zoo, "--public", "--trusted", "--auth", "me:secret"]) == 2
    assert mode("--allow-root", str(tmp_path / "data")) is False
    assert (tmp_path / "data").resolve() in seen["access"].roots


def test_a_path_is_checked_after_resolving_links_and_dots(tmp_path, monkeypatch):
    from explorer.serve.access import Access, AccessRefused

    monkeypatch.setenv("EXPLORER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("EXPLORER_ALLOWED_ROOTS", f"{tmp_path / 'env-a'}{os.pathsep}{tmp_path / 'env-b'}")
    (tmp_path / "data" / "urban1k").mkdir(parents=True)
    (tmp_path / "secret").mkdir()
    (tmp_path / "data" / "leak").symlink_to(tmp_path / "secret", target_is_directory=True)
    access = Access.for_app(tmp_path / "zoo", allow_roots=[tmp_path / "data"])
    assert access.roots == tuple(p.resolve() for p in (tmp_path / "zoo", tmp_path / "home", tmp_path / "data",
                                                        tmp_path / "env-a", tmp_path / "env-b"))
    assert access.path(str(tmp_path / "data" / "urban1k"), "dataset folder") == (tmp_path / "data" / "urban1k").resolve()
    assert access.path(f"  {tmp_path / 'env-b' / 'x.pt'}  ", "weights file") == (tmp_path / "env-b" / "x.pt").resolve()
    for outside in (tmp_path / "secret", tmp_path / "data" / "leak", tmp_path / "data" / ".." / "secret",
                    tmp_path / "database", "/etc/passwd", "relative/path"):
        with pytest.raises(AccessRefused, match="not under an allowed folder; start the app with --allow-root"):
            access.path(str(outside), "dataset folder")
    for bad in ("", "   ", "a\x00b"):
        with pytest.raises(AccessRefused):
            access.path(bad, "dataset folder")
    public = Access.for_app(tmp_path / "zoo", allow_roots=[tmp_path / "data"], public=True)
    with pytest.raises(AccessRefused, match="public demo: a dataset folder cannot be typed here"):
        public.path(str(tmp_path / "data" / "urban1k"), "dataset folder")
    with pytest.raises(AccessRefused, match="public demo: adding a model is turned off"):
        public.owner_only("adding a model")
    access.owner_only("adding a model")  # the owner may
    with pytest.raises(AccessRefused, match="file system's root"):
        Access.for_app(tmp_path / "zoo", allow_roots=["/"])
