"""Log dirs: a local directory or an object-store location, and the ``storage.*`` settings
that say how to reach a store (DESIGN §16). Pure: parsing and merging, no I/O.

A log dir is a local path or a store URI: ``s3://bucket/prefix`` (also ``s3a://``),
``gs://bucket/prefix``, ``az://container/prefix`` or
``abfss://container@account.dfs.core.windows.net/prefix``.

Endpoint and credentials come from the variables delta-rs and pyarrow read
(``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``,
``AWS_ALLOW_HTTP``, ...) unless ``storage.*`` settings give them (:data:`STORAGE_SETTINGS`;
``spark.sparklog.storage.*`` in a Spark session): the settings win.

Invariant: a :class:`StorageLocation` names one root, normalised (no trailing slash; a local
path absolute), so two spellings of one place compare equal and its URI parses back to it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sparklog.errors import ConfigError

__all__ = ["STORAGE_SETTINGS", "Scheme", "StorageLocation", "StorageSettings", "parse_location"]

Scheme = Literal["file", "s3", "gs", "az"]

_SCHEMES: dict[str, Scheme] = {
    "s3": "s3",
    "s3a": "s3",
    "gs": "gs",
    "az": "az",
    "abfs": "az",
    "abfss": "az",
    "file": "file",
}

# ``storage.<name>`` settings and the variable each stands for (the names delta-rs and pyarrow
# read, so a setting means what the variable would).
STORAGE_SETTINGS: dict[str, str] = {
    "storage.endpoint": "AWS_ENDPOINT_URL",
    "storage.region": "AWS_REGION",
    "storage.access.key.id": "AWS_ACCESS_KEY_ID",
    "storage.secret.access.key": "AWS_SECRET_ACCESS_KEY",
    "storage.session.token": "AWS_SESSION_TOKEN",
    "storage.allow.http": "AWS_ALLOW_HTTP",
}


@dataclass(frozen=True)
class StorageLocation:
    """A log dir: ``scheme`` "file" with an absolute ``path``, or a store's ``bucket``
    (container) and ``prefix`` inside it ("" for the bucket's root)."""

    scheme: Scheme
    path: str = ""  # file: the absolute directory
    bucket: str = ""  # stores: the bucket or container (abfss: container@account...)
    prefix: str = ""  # stores: the key prefix, without leading or trailing "/"

    @property
    def is_object_store(self) -> bool:
        return self.scheme != "file"

    @property
    def uri(self) -> str:
        if not self.is_object_store:
            return self.path
        root = f"{self.scheme}://{self.bucket}"
        return f"{root}/{self.prefix}" if self.prefix else root

    def child(self, *parts: str) -> StorageLocation:
        """The location ``parts`` below this one (``topics``, a topic's name, ...)."""
        for part in parts:
            if not part or part in (".", "..") or "/" in part:
                raise ConfigError(f"{part!r} is not one path segment (under {self.uri})")
        if not self.is_object_store:
            return StorageLocation("file", path=os.path.join(self.path, *parts))
        return StorageLocation(self.scheme, bucket=self.bucket, prefix="/".join(p for p in (self.prefix, *parts) if p))

    def __str__(self) -> str:
        return self.uri


def parse_location(text: str | os.PathLike[str]) -> StorageLocation:
    """A log dir from a local path or a store URI; a ``ConfigError`` says what is wrong."""
    raw = os.fspath(text).strip()
    if not raw:
        raise ConfigError("log.dirs is empty: give a local directory or a store URI such as s3://bucket/prefix")
    scheme_text, sep, rest = raw.partition("://")
    if not sep:
        return StorageLocation("file", path=str(Path(raw).expanduser().resolve()))
    scheme = _SCHEMES.get(scheme_text.lower())
    if scheme is None:
        raise ConfigError(
            f"log dir {raw!r}: scheme {scheme_text!r} is not supported; use a local path, "
            f"or one of {', '.join(sorted(s + '://' for s in _SCHEMES))}"
        )
    if scheme == "file":
        if not rest.startswith("/"):
            raise ConfigError(f"log dir {raw!r}: a file:// URI needs an absolute path (file:///dir)")
        return StorageLocation("file", path=str(Path(rest).resolve()))
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise ConfigError(f"log dir {raw!r} names no bucket: write {scheme_text}://<bucket>/<prefix>")
    return StorageLocation(scheme, bucket=bucket, prefix=prefix.strip("/"))


@dataclass(frozen=True)
class StorageSettings:
    """The ``storage.*`` settings given explicitly (None: the environment decides)."""

    values: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> StorageSettings:
        """Settings from ``storage.*`` keys of ``config`` (other keys are ignored); an unknown
        ``storage.`` key is a ``ConfigError``."""
        values = []
        for key, value in config.items():
            if not key.startswith("storage."):
                continue
            if key not in STORAGE_SETTINGS:
                raise ConfigError(f"Unknown storage setting {key!r}. Allowed: {', '.join(sorted(STORAGE_SETTINGS))}")
            if value is not None and str(value) != "":
                values.append((key, str(value)))
        return cls(tuple(sorted(values)))

    @classmethod
    def from_variables(cls, variables: Mapping[str, str]) -> StorageSettings:
        """Settings that give exactly these ``AWS_*`` ``variables`` (those of :meth:`variables`)."""
        return cls(tuple(sorted((key, variables[var]) for key, var in STORAGE_SETTINGS.items() if var in variables)))

    def variables(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """The effective ``AWS_*`` variables: the environment's, overridden by the settings."""
        env = os.environ if environ is None else environ
        found = {var: env[var] for var in STORAGE_SETTINGS.values() if env.get(var)}
        found.update({STORAGE_SETTINGS[key]: value for key, value in self.values})
        return found

    def endpoint(self, environ: Mapping[str, str] | None = None) -> str:
        return self.variables(environ).get("AWS_ENDPOINT_URL", "the provider's default endpoint")
