"""Start a public explorer page and nginx in front of it, from one command (scripts/serve_public.sh).

nginx runs as this user, its configuration rendered from deploy/nginx-explorer.conf into a run folder (its pid,
logs and buffers there, not /var): the proxy listens on --port (all addresses) and hands whole requests to the
page on 127.0.0.1:--app-port, which trusts X-Forwarded-For from loopback only. With --cert and --key it listens
with TLS. Ctrl-C or SIGTERM stops both.

    python scripts/serve_public.py --port 8080            # http://<this machine>:8080
    python scripts/serve_public.py --port 8443 --cert fullchain.pem --key privkey.pem
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SERVER_BLOCK = ROOT / "deploy" / "nginx-explorer.conf"


def render(run_dir: Path, port: int, app_port: int, listen: str = "0.0.0.0", cert: str | None = None,
           key: str | None = None, workers: int = 1) -> Path:
    """A whole nginx.conf in ``run_dir`` around deploy/nginx-explorer.conf's server block, on these ports."""
    block = SERVER_BLOCK.read_text().replace("127.0.0.1:7861", f"127.0.0.1:{app_port}")
    tls = f" ssl;\n    ssl_certificate {cert};\n    ssl_certificate_key {key};\n    ssl_protocols TLSv1.2 TLSv1.3" \
        if cert and key else ""
    block = block.replace("    listen 80;", f"    listen {listen}:{port}{tls};")
    for folder in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (run_dir / folder).mkdir(parents=True, exist_ok=True)
    conf = run_dir / "nginx.conf"
    conf.write_text(f"""worker_processes {workers};
pid {run_dir}/nginx.pid;
error_log {run_dir}/error.log warn;
worker_rlimit_nofile 16384;
events {{ worker_connections 8192; }}
http {{
    access_log off;
    client_body_temp_path {run_dir}/client_body;
    proxy_temp_path {run_dir}/proxy;
    fastcgi_temp_path {run_dir}/fastcgi;
    uwsgi_temp_path {run_dir}/uwsgi;
    scgi_temp_path {run_dir}/scgi;
{block}
}}
""")
    return conf


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if Path(p).exists()), None)


def start_nginx(conf: Path) -> subprocess.Popen:
    binary = nginx_binary()
    if binary is None:
        raise SystemExit("nginx is not installed (Debian: apt-get install nginx)")
    return subprocess.Popen([binary, "-c", str(conf), "-p", str(conf.parent), "-g", "daemon off;"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8080, help="where visitors connect (nginx)")
    parser.add_argument("--app-port", type=int, default=7861, help="the page, on 127.0.0.1 only")
    parser.add_argument("--cert"), parser.add_argument("--key")
    parser.add_argument("--run-dir", help="nginx's configuration, pid and logs (default: a new temp folder)")
    args, app_args = parser.parse_known_args(argv)
    run_dir = Path(args.run_dir or tempfile.mkdtemp(prefix="explorer-proxy-"))
    conf = render(run_dir, args.port, args.app_port, cert=args.cert, key=args.key)
    proxy = start_nginx(conf)  # first: without nginx it stops here, before a page is left running behind nothing
    app = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--public", "--host", "127.0.0.1", "--port",
                            str(args.app_port), "--forwarded-allow-ips", "127.0.0.1", *app_args])
    print(f"explorer behind nginx: port {args.port} -> 127.0.0.1:{args.app_port} (nginx files in {run_dir})",
          flush=True)

    def stop(*_):
        for process in (proxy, app):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    try:
        while app.poll() is None and proxy.poll() is None:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        stop()
        for process in (proxy, app):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
    return app.returncode or 0


if __name__ == "__main__":
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    raise SystemExit(main())
