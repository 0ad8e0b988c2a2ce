"""`python -m explorer.cli`: the same as the `explorer` command."""

from explorer.cli import main

raise SystemExit(main())
