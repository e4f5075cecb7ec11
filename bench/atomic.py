"""Whole-or-nothing output for the bench scripts (the project's rule: nothing half-written).
A file is written beside its target under a temporary name, given a new file's usual mode,
then renamed into place; on any failure the temporary goes and the target stays as it was."""
import json
import os
import tempfile


def replace_with(path: str, write, binary: bool = False) -> None:
    """write(f) into a temporary file beside path, then rename it to path."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb" if binary else "w") as f:
            write(f)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 is not what a written file gets
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def save_json(path: str, doc) -> None:
    replace_with(path, lambda f: json.dump(doc, f, indent=1))


def save_text(path: str, text: str) -> None:
    replace_with(path, lambda f: f.write(text))
