"""Checkpoint files: reading them safely, released key layouts, strict loading."""
