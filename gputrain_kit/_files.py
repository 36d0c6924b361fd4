"""Files the kit writes beside their target first, then renames into place (``save_verified``)."""
from __future__ import annotations

import os
import secrets
from pathlib import Path


def new_temporary(path: Path, suffix: str, func: str) -> Path:
    """An empty file beside ``path`` to write into first, with the permissions a new file gets (the umask's, as
    Keras's own save gives; ``tempfile.mkstemp`` would make it readable by its owner only)."""
    for _ in range(100):
        tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}{suffix}"
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            continue
        return tmp
    raise FileExistsError(f"{func}: no free temporary name beside {path}")  # pragma: no cover
