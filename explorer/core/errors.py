"""Errors a user can read.

Every failure that bad input can cause is one of these, with a message that
says what was wrong and what to do. The UI shows ``str(error)``; the CLI
prints it and exits with status 2. Anything else escaping is a bug.
"""

from __future__ import annotations


class ExplorerError(Exception):
    """Base class: the message is meant for the person at the keyboard."""


class InputError(ExplorerError):
    """A value given to a command, a page field or an API call (``explorer.load``, ``Model``...) is out of
    range, of the wrong kind, or names something that does not exist; the message says what it takes."""


class ConfigError(ExplorerError):
    """A configuration cannot be used: a training or job config, a method's options, a sweep, a plugin's
    declaration; the message names the field and what it takes."""


class ImageError(ExplorerError):
    """The image cannot be read, or is too large to read safely."""


class CaptionError(ExplorerError):
    """The caption is empty or unusable."""


class CheckpointError(ExplorerError):
    """A weights file is missing, unreadable, or of an unknown layout."""


class UnsafeCheckpointError(CheckpointError):
    """The file can only be read by unpickling arbitrary Python objects."""


class CheckpointMismatchError(CheckpointError):
    """The file's keys or shapes do not match the model they should fill."""

    def __init__(self, message: str, report=None):
        super().__init__(message)
        self.report = report


class ManifestError(ExplorerError):
    """A zoo manifest is missing, malformed, or names something that is not there."""


class ExportError(ExplorerError):
    """A model cannot be written out in the asked format (or not whole: it says what would be left out)."""


class ModelNameError(ManifestError):
    """A name a new model cannot take: another model has it, or it cannot be a file name in the zoo folder."""
