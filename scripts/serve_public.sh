#!/usr/bin/env bash
# A public explorer page with nginx in front (deploy/nginx-explorer.conf): one command starts both, Ctrl-C stops
# both. Arguments: --port (8080), --app-port (7861), --cert/--key for TLS; any other goes to app.py.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python scripts/serve_public.py "$@"
