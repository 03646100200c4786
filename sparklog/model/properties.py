"""Java-style properties files (``key=value``), as Kafka's tools and sparklog's configuration
read them. Pure: no I/O beyond reading the file; a malformed line is a ``ConfigError`` naming it."""

from __future__ import annotations

import os
from pathlib import Path

from sparklog.errors import ConfigError

__all__ = ["load_properties"]


def load_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """Read a Java-style ``key=value`` properties file (``#``/``!`` comments, ``:`` also separates)."""
    props: dict[str, str] = {}
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"Cannot read properties file {path}: {exc.strerror}") from exc
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        for sep in ("=", ":"):
            if sep in stripped:
                key, value = stripped.split(sep, 1)
                props[key.strip()] = value.strip()
                break
        else:
            raise ConfigError(f"{path}:{lineno}: expected key=value, got {stripped!r}")
    return props
