"""Credentials by reference: MirrorMaker 2's config providers, resolved when the config is loaded.

    config.providers = file, env, directory
    config.providers.file.class = org.apache.kafka.common.config.provider.FileConfigProvider
    config.providers.env.class = org.apache.kafka.common.config.provider.EnvVarConfigProvider
    config.providers.directory.class = org.apache.kafka.common.config.provider.DirectoryConfigProvider
    primary.sasl.jaas.config = org.apache.kafka.common.security.scram.ScramLoginModule required \\
        username="mirror" password="${file:/etc/mirror/creds.properties:password}";

A reference is Kafka's ``${<provider>:<path>:<key>}``, or ``${<provider>:<key>}`` with an empty path,
anywhere in any value; ``<provider>`` is a name listed in ``config.providers``, whose class says
what it reads:

- ``FileConfigProvider``: ``<key>`` of the properties file ``<path>`` (``java.util.Properties``
  syntax, UTF-8);
- ``DirectoryConfigProvider``: the whole content of the file ``<key>`` in the folder ``<path>``;
- ``EnvVarConfigProvider``: the environment variable ``<key>``; it takes no path.

Their parameters are honoured as Kafka does: ``config.providers.<name>.param.allowed.paths``
(file, directory: comma-separated absolute paths; only files under them may be read) and
``config.providers.<name>.param.allowlist.pattern`` (env: a regex found in the variable's name).
Two deliberate differences: a reference that cannot be resolved (missing file, key or variable, an
undeclared provider) is an error, where Kafka leaves the text as it is and the login fails later;
and a relative path is relative to the config file's folder, as ``mirrorflow.state.dir`` is.

Invariants: a resolved config holds no reference and no ``config.providers*`` key; a value with a
reference is trimmed after substitution, as Kafka's ConfigDef trims values; a resolved value is never
resolved again; and every failure is a ``ConfigError`` naming the key that holds the reference and
the file, variable or key it misses, never a value read from a provider.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from mirrorflow.config.properties import parse_properties
from mirrorflow.errors import ConfigError

PROVIDERS = "config.providers"
FILE_PROVIDER = "org.apache.kafka.common.config.provider.FileConfigProvider"
DIRECTORY_PROVIDER = "org.apache.kafka.common.config.provider.DirectoryConfigProvider"
ENV_PROVIDER = "org.apache.kafka.common.config.provider.EnvVarConfigProvider"
_ALLOWED_PATHS = "allowed.paths"
_ALLOWLIST_PATTERN = "allowlist.pattern"
_PARAMETERS = {
    FILE_PROVIDER: _ALLOWED_PATHS,
    DIRECTORY_PROVIDER: _ALLOWED_PATHS,
    ENV_PROVIDER: _ALLOWLIST_PATTERN,
}
# Kafka's ConfigTransformer pattern ${provider:[path:]key}, kept within one ${...}: Kafka's lazy
# .*? could run past a } into the next reference of the same value.
_REFERENCE = re.compile(r"\$\{([^}:]*):(?:([^}]*?):)?([^}]*)\}")
_LIST_SEPARATOR = re.compile(r"\s*,\s*")


@dataclass(frozen=True)
class _Provider:
    name: str
    class_name: str
    allowed_paths: tuple[Path, ...] | None = None
    allowlist: re.Pattern[str] | None = None


def resolve_references(raw: Mapping[str, str], env: Mapping[str, str], base: Path) -> dict[str, str]:
    """``raw`` (trimmed properties as written) with every reference replaced by what it refers to and
    the ``config.providers*`` keys removed. ``env`` is what the env provider reads; relative paths
    are relative to ``base``.
    """
    reader = _Reader(_declared_providers(raw), env, base)
    return {
        key: _REFERENCE.sub(functools.partial(reader.read, key), value).strip()
        for key, value in raw.items()
        if key != PROVIDERS and not key.startswith(f"{PROVIDERS}.")
    }


def _declared_providers(raw: Mapping[str, str]) -> dict[str, _Provider]:
    names = tuple(_LIST_SEPARATOR.split(raw[PROVIDERS].strip())) if raw.get(PROVIDERS) else ()
    settings: dict[str, dict[str, tuple[str, str]]] = {name: {} for name in names}
    for key, value in raw.items():
        if not key.startswith(f"{PROVIDERS}."):
            continue
        name, _, setting = key[len(PROVIDERS) + 1 :].partition(".")
        if name not in settings:
            raise ConfigError(
                f"provider {name!r} is not listed in {PROVIDERS} ({', '.join(names) or 'empty'}); "
                "add it there or remove the key",
                key=key,
            )
        settings[name][setting] = (key, value)
    return {name: _provider(name, settings[name]) for name in names}


def _provider(name: str, settings: Mapping[str, tuple[str, str]]) -> _Provider:
    """One declared provider from its ``class`` and ``param.*`` settings (key as written, value)."""
    class_key = f"{PROVIDERS}.{name}.class"
    if "class" not in settings:
        raise ConfigError(f"missing; set it to one of {', '.join(_PARAMETERS)}", key=class_key)
    class_name = settings["class"][1]
    if class_name not in _PARAMETERS:
        raise ConfigError(
            f"expected one of {', '.join(_PARAMETERS)}, got {class_name!r}; other config providers "
            "are not supported",
            key=class_key,
        )
    parameter = f"param.{_PARAMETERS[class_name]}"
    for setting, (key, _value) in settings.items():
        if setting not in ("class", parameter):
            raise ConfigError(
                f"unknown setting of {class_name.rsplit('.', 1)[1]}; its only parameter is "
                f"{PROVIDERS}.{name}.{parameter}",
                key=key,
            )
    # Kafka: an empty parameter restricts nothing.
    if not settings.get(parameter, ("", ""))[1]:
        return _Provider(name, class_name)
    key, value = settings[parameter]
    if class_name != ENV_PROVIDER:
        return _Provider(name, class_name, allowed_paths=_allowed_paths(key, value))
    try:
        return _Provider(name, class_name, allowlist=re.compile(value))
    except re.error as error:
        raise ConfigError(f"invalid regular expression ({error})", key=key) from error


def _allowed_paths(key: str, value: str) -> tuple[Path, ...]:
    """Kafka's ``allowed.paths``: each entry absolute and existing."""
    paths = tuple(Path(os.path.normpath(entry)) for entry in _LIST_SEPARATOR.split(value))
    for path in paths:
        if not path.is_absolute() or not path.exists():
            raise ConfigError(f"{path} is not an absolute path that exists; list existing paths", key=key)
    return paths


class _Reader:
    """Looks references up, parsing each properties file once per load."""

    def __init__(self, providers: Mapping[str, _Provider], env: Mapping[str, str], base: Path) -> None:
        self._providers = providers
        self._env = env
        self._base = base
        self._files: dict[Path, dict[str, str]] = {}

    def read(self, key: str, match: re.Match[str]) -> str:
        """The value ``match`` (a reference in the value of ``key``) refers to."""
        name, path, item = match.group(1), match.group(2) or "", match.group(3)
        reference = match.group(0)
        provider = self._providers.get(name)
        if provider is None:
            declared = ", ".join(self._providers) or "none"
            raise ConfigError(
                f"{reference} refers to config provider {name!r}, which is not declared in {PROVIDERS} "
                f"(declared: {declared}); declare it with {PROVIDERS} and {PROVIDERS}.{name}.class",
                key=key,
            )
        if provider.class_name == ENV_PROVIDER:
            return self._variable(key, reference, provider, path, item)
        if not path:
            raise ConfigError(f"{reference} has no path; write ${{{name}:<path>:<key>}}", key=key)
        location = self._allowed(key, reference, provider, path)
        if provider.class_name == FILE_PROVIDER:
            return self._file_key(key, reference, location, item)
        return self._directory_entry(key, reference, location, item)

    def _variable(self, key: str, reference: str, provider: _Provider, path: str, variable: str) -> str:
        if path:
            raise ConfigError(
                f"{reference}: {ENV_PROVIDER.rsplit('.', 1)[1]} takes no path; write "
                f"${{{provider.name}:{variable}}}",
                key=key,
            )
        if provider.allowlist is not None and not provider.allowlist.search(variable):
            raise ConfigError(
                f"{reference}: environment variable {variable} does not match "
                f"{PROVIDERS}.{provider.name}.param.{_ALLOWLIST_PATTERN}",
                key=key,
            )
        if variable not in self._env:
            raise ConfigError(
                f"{reference}: environment variable {variable} is not set; set it for every process "
                "that loads this config (Airflow's DAG processor and workers, and the Spark driver)",
                key=key,
            )
        return self._env[variable]

    def _allowed(self, key: str, reference: str, provider: _Provider, path: str) -> Path:
        location = Path(os.path.normpath(self._base / path))
        if provider.allowed_paths is not None and not any(
            location.is_relative_to(allowed) for allowed in provider.allowed_paths
        ):
            raise ConfigError(
                f"{reference}: {location} is not under {PROVIDERS}.{provider.name}.param.{_ALLOWED_PATHS}",
                key=key,
            )
        return location

    def _file_key(self, key: str, reference: str, location: Path, item: str) -> str:
        if location not in self._files:
            text = _read_text(key, reference, location, "credentials file")
            try:
                self._files[location] = parse_properties(text, str(location))
            except ConfigError as error:
                raise ConfigError(f"{reference}: {error}", key=key) from error
        values = self._files[location]
        if item not in values:
            raise ConfigError(f"{reference}: the credentials file {location} has no key {item!r}", key=key)
        return values[item]

    def _directory_entry(self, key: str, reference: str, location: Path, item: str) -> str:
        if not location.is_dir():
            raise ConfigError(f"{reference}: the folder {location} does not exist", key=key)
        # The key names a file in the folder, never a path elsewhere (Kafka lists the folder).
        if item in ("", ".", "..") or "/" in item:
            raise ConfigError(f"{reference}: {item!r} is not a file name", key=key)
        return _read_text(key, reference, location / item, "file")


def _read_text(key: str, reference: str, path: Path, what: str) -> str:
    """The UTF-8 text of ``path``; errors name the file and never its content."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError as error:
        raise ConfigError(f"{reference}: the {what} {path} does not exist", key=key) from error
    except OSError as error:
        raise ConfigError(
            f"{reference}: cannot read the {what} {path} ({error.strerror})", key=key
        ) from error
    # Not chained: the decode error holds the file's bytes.
    except UnicodeDecodeError:
        raise ConfigError(
            f"{reference}: the {what} {path} is not UTF-8 text; save it as UTF-8", key=key
        ) from None
