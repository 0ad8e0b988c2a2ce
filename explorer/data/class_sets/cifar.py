"""CIFAR-10 and CIFAR-100 test sets as Krizhevsky releases them.

The binary release (read by default): ``cifar-10-batches-bin/test_batch.bin``, 10,000 records of one
label byte and 3,072 pixel bytes (the red plane, then green, then blue, each 32 rows of 32), with the
class names in ``batches.meta.txt``; ``cifar-100-binary/test.bin``, records of a coarse and a fine
label byte then the pixels, names in ``fine_label_names.txt`` (the fine labels are the 100 classes).
``--data`` is that folder or the folder holding it.

The python release (``cifar-10-batches-py/test_batch``, ``cifar-100-python/test``) is a pickle: it is
read only with ``allow_pickle`` (``--allow-pickle``), since unpickling a file can run code.
Class names are the release's own (open_clip ships none for CIFAR), underscores read as spaces, as CLIP's
``data/prompts.md`` spells them ("aquarium fish"). Prompts: CLIP's 18 CIFAR templates (``ClassSet.templates``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from explorer.data.class_sets.base import ClassPicture, ClassSet, Skipped, spoken
from explorer.data.errors import DatasetError

PIXELS = 3 * 32 * 32
RELEASES = {  # layout -> (binary folder, test file, names file, label bytes, python folder, test, meta, key, names key)
    "cifar10": ("cifar-10-batches-bin", "test_batch.bin", "batches.meta.txt", 1,
                "cifar-10-batches-py", "test_batch", "batches.meta", b"labels", b"label_names"),
    "cifar100": ("cifar-100-binary", "test.bin", "fine_label_names.txt", 2,
                 "cifar-100-python", "test", "meta", b"fine_labels", b"fine_label_names"),
}


def expects(layout: str) -> str:
    binary, test, names, *_ = RELEASES[layout]
    return f"{binary}/{test} and {binary}/{names} (the binary release)"


def read(root: Path, layout: str, allow_pickle: bool = False) -> ClassSet:
    binary, test, names_file, label_bytes, python, python_test, meta, key, names_key = RELEASES[layout]
    folder = root if (root / test).is_file() else root / binary
    if (folder / test).is_file():
        return _binary(folder, layout, folder / test, folder / names_file, label_bytes)
    pickled = root if (root / python_test).is_file() else root / python
    if (pickled / python_test).is_file():
        if not allow_pickle:
            raise DatasetError(f"{pickled} is CIFAR's python release, a pickle: unpickling a file can run code. "
                               f"Use the binary release ({expects(layout)}), or pass --allow-pickle if you trust it")
        return _pickled(pickled, layout, python_test, meta, key, names_key)
    raise DatasetError(f"no CIFAR test set at {root}: the {layout} layout expects {expects(layout)}, or "
                       f"{python}/{python_test} with --allow-pickle")


def _binary(folder: Path, layout: str, test: Path, names_file: Path, label_bytes: int) -> ClassSet:
    if not names_file.is_file():
        raise DatasetError(f"{names_file} is missing: the {layout} layout reads the class names from it")
    classnames = [spoken(n) for n in names_file.read_text(encoding="utf-8", errors="replace").splitlines()
                  if n.strip()]
    data = np.fromfile(test, dtype=np.uint8)
    size = label_bytes + PIXELS
    whole = len(data) // size
    skipped = [Skipped(f"{test.name} bytes {whole * size}..{len(data)}", "truncated record: the file ends "
                       f"{len(data) - whole * size} bytes into a record")] if len(data) % size else []
    records = data[: whole * size].reshape(whole, size)
    labels = records[:, label_bytes - 1].astype(int)  # CIFAR-100: the fine label, after the coarse one
    pixels = records[:, label_bytes:].reshape(whole, 3, 32, 32).transpose(0, 2, 3, 1)
    return _set(layout, folder, classnames, labels, pixels, skipped, f"{names_file.name} (the release's own)")


def _pickled(folder: Path, layout: str, test: str, meta: str, key: bytes, names_key: bytes) -> ClassSet:
    import pickle  # noqa: S403 - only behind --allow-pickle, the user's explicit trust in the file

    try:
        with open(folder / test, "rb") as handle:
            batch = pickle.load(handle, encoding="bytes")  # noqa: S301
        with open(folder / meta, "rb") as handle:
            names = pickle.load(handle, encoding="bytes")[names_key]  # noqa: S301
        data, labels = np.asarray(batch[b"data"], dtype=np.uint8), np.asarray(batch[key], dtype=int)
    except (OSError, pickle.UnpicklingError, KeyError, TypeError, ValueError, EOFError) as error:
        raise DatasetError(f"{folder}: not CIFAR's python release ({error!r})") from error
    classnames = [spoken(n.decode() if isinstance(n, bytes) else str(n)) for n in names]
    pixels = data.reshape(len(data), 3, 32, 32).transpose(0, 2, 3, 1)
    return _set(layout, folder, classnames, labels, pixels, [], f"{meta} (the release's own)")


def _set(layout, folder, classnames, labels, pixels, skipped, names_from) -> ClassSet:
    pictures = []
    for index, (label, image) in enumerate(zip(labels, pixels)):
        if not 0 <= label < len(classnames):
            skipped.append(Skipped(f"record {index}", f"unknown class: label {label} of {len(classnames)} classes"))
            continue
        pictures.append(ClassPicture(f"{index}", int(label), pixels=np.ascontiguousarray(image)))
    return ClassSet(layout, folder, tuple(classnames), tuple(pictures), tuple(skipped), names_from=names_from,
                    templates="cifar")  # CLIP's and clip_benchmark's 18 CIFAR templates


def matches(root: Path, layout: str) -> bool:
    binary, test, _, _, python, python_test, *_ = RELEASES[layout]
    return any(p.is_file() for p in (root / test, root / binary / test, root / python_test, root / python /
                                     python_test))


__all__ = ["RELEASES", "expects", "matches", "read"]
