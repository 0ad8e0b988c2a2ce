"""The error a dataset on disk raises when it cannot be read or written as asked."""

from __future__ import annotations

from explorer.core.errors import ExplorerError


class DatasetError(ExplorerError):
    """A dataset folder or file is missing, malformed, or would be overwritten without consent."""
