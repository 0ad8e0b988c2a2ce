"""Open the explorer in the browser: `python app.py` (see README for options)."""

from explorer.cli import main

if __name__ == "__main__":
    raise SystemExit(main(["app", *__import__("sys").argv[1:]]))
