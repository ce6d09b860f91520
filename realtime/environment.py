"""Reading the environment: typed values, each problem collected before failing, warnings
for what is acceptable but worth saying (`Settings.from_env` is the one user).

A `Reading` is how one variable is read (its type and bounds) and how the configuration table
says what it takes; `realtime/settings.py` declares one per setting.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

MIN_HS256_SECRET_BYTES = 32
# LiveKit's secrets are LiveKit's to choose (its dev mode uses `secret`): shorter than this is a
# warning, never an error
MIN_LIVEKIT_SECRET_BYTES = 32
# a Standard Webhooks secret: `whsec_` and the base64 of 24 to 64 random bytes
WEBHOOK_SECRET_PREFIX = "whsec_"  # noqa: S105 - the format's prefix, not a secret
WEBHOOK_SECRET_BYTES = (24, 64)


def without_credentials(url: str) -> str:
    """`url` as the log and `check` may show it: scheme, host, port and path; never a user,
    password or query (where credentials travel)."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return f"unix://{parts.path}"
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


class EnvironmentReader:
    """Reads typed values from the environment and collects every problem before failing."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = environ
        self.problems: list[str] = []
        self.warnings: list[str] = []

    def text(self, name: str) -> str | None:
        value = self.environ.get(name, "").strip()
        return value or None

    def secret(self, name: str) -> str | None:
        """An HS256 key of at least MIN_HS256_SECRET_BYTES (the value is never echoed)."""
        value = self.text(name)
        if value is not None and len(value.encode()) < MIN_HS256_SECRET_BYTES:
            self.problems.append(f"{name} must be at least {MIN_HS256_SECRET_BYTES} bytes long")
            return None
        return value

    def short_livekit_secret(self, name: str, secret: str | None) -> bool:
        """Warn (naming `name`, never the value) when a LiveKit secret is short; True then."""
        if secret is None or len(secret.encode()) >= MIN_LIVEKIT_SECRET_BYTES:
            return False
        self.warnings.append(
            f"{name} holds a secret shorter than {MIN_LIVEKIT_SECRET_BYTES} bytes: fine for "
            "`livekit-server --dev`, too weak to guard production tokens and webhooks"
        )
        return True

    def flag(self, name: str, *, default: bool = False) -> bool:
        value = (self.text(name) or ("1" if default else "0")).lower()
        if value in ("1", "true", "yes", "on"):
            return True
        if value in ("0", "false", "no", "off"):
            return False
        self.problems.append(f"{name} must be 1/0, true/false, yes/no or on/off, not {value!r}")
        return False

    def integer(self, name: str, default: int, *, low: int, high: int) -> int:
        raw = self.text(name)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            self.problems.append(f"{name} must be a whole number, not {raw!r}")
            return default
        if not low <= value <= high:
            self.problems.append(f"{name} must be between {low} and {high}, not {value}")
            return default
        return value

    def number(self, name: str, default: float, *, low: float, high: float) -> float:
        raw = self.text(name)
        if raw is None:
            return default
        try:
            value = float(raw)
        except ValueError:
            self.problems.append(f"{name} must be a number, not {raw!r}")
            return default
        if not low <= value <= high:
            self.problems.append(f"{name} must be between {low:g} and {high:g}, not {raw}")
            return default
        return value

    def url(self, name: str, schemes: tuple[str, ...]) -> str | None:
        raw = self.text(name)
        if raw is None:
            return None
        try:
            parts = urlsplit(raw)
            valid = parts.scheme in schemes and bool(
                parts.path if parts.scheme == "unix" else parts.hostname
            )
            if parts.port == 0:  # .port raises ValueError unless a whole number up to 65535
                valid = False
        except ValueError:
            valid = False
        if not valid:
            # never echo the value: URLs may carry passwords
            self.problems.append(
                f"{name} must be a {'/'.join(schemes)} URL with a host and, if it names a "
                "port, a port from 1 to 65535"
            )
            return None
        return raw

    def origins(self, name: str) -> tuple[str, ...]:
        """A comma list of web origins (`https://app.example.com`, a port allowed, no path), or
        `*` for any."""
        raw = self.text(name)
        if raw is None:
            return ()
        found: list[str] = []
        for item in (part.strip() for part in raw.split(",")):
            if item == "*":
                found.append(item)
                continue
            try:
                parts = urlsplit(item)
                valid = (
                    parts.scheme in ("http", "https")
                    and bool(parts.hostname)
                    and parts.path in ("", "/")
                    and not (parts.query or parts.fragment or parts.username)
                    and parts.port != 0
                )
            except ValueError:
                valid = False
            if not valid:
                self.problems.append(
                    f"{name} must be a comma list of origins such as https://app.example.com "
                    "(scheme, host and an optional port; no path), or *"
                )
                return ()
            found.append(f"{parts.scheme}://{parts.netloc.lower()}")
        return tuple(found)

    def key_pairs(self, name: str) -> tuple[tuple[str, str], ...]:
        raw = self.text(name)
        if raw is None:
            return ()
        pairs: list[tuple[str, str]] = []
        for item in raw.split(","):
            key, sep, secret = item.strip().partition(":")
            if not sep or not key or not secret:
                # never echo the value: it holds secrets
                self.problems.append(f"{name} must be a comma list of key:secret pairs")
                return ()
            pairs.append((key, secret))
        return tuple(pairs)

    def capabilities(
        self, name: str, known: tuple[str, ...], *, what: str = "capabilities"
    ) -> frozenset[str]:
        raw = self.text(name)
        if raw is None:
            return frozenset(known)
        names = {item.strip() for item in raw.split(",") if item.strip()}
        if not names:
            self.problems.append(f"{name} must list at least one of the {what}")
        unknown = sorted(names - set(known))
        if unknown:
            self.problems.append(
                f"{name} has unknown {what} {', '.join(unknown)}; known: {', '.join(known)}"
            )
        return frozenset(names & set(known))

    def webhook_secret(self, name: str) -> str | None:
        """A Standard Webhooks secret, `whsec_` + base64 of 24..64 bytes (never echoed)."""
        value = self.text(name)
        if value is None:
            return None
        low, high = WEBHOOK_SECRET_BYTES
        try:
            body = value.removeprefix(WEBHOOK_SECRET_PREFIX)
            size = len(base64.b64decode(body, validate=True))
        except (binascii.Error, ValueError):
            size = 0
        if not value.startswith(WEBHOOK_SECRET_PREFIX) or not low <= size <= high:
            self.problems.append(
                f"{name} must be a Standard Webhooks secret: {WEBHOOK_SECRET_PREFIX} followed by "
                f"the base64 of {low} to {high} random bytes"
            )
            return None
        return value

    def tenant_urls(
        self, name: str, *, allow_http: bool, http_switch: str | None
    ) -> tuple[tuple[str, str], ...]:
        """A JSON object, tenant → URL, each URL as `https_url` allows it."""
        raw = self.text(name)
        if raw is None:
            return ()
        try:
            value = json.loads(raw)
        except ValueError:
            value = None
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and k and isinstance(v, str) for k, v in value.items()
        ):
            self.problems.append(
                f'{name} must be a JSON object of tenant → URL, e.g. {{"acme": "https://…"}}'
            )
            return ()
        found = []
        for tenant, url in value.items():
            checked = self._https(name, url, allow_http=allow_http, http_switch=http_switch)
            if checked is None:
                return ()
            found.append((tenant, checked))
        return tuple(found)

    def https_url(self, name: str, *, allow_http: bool, http_switch: str | None) -> str | None:
        """An https:// URL; http:// only to a loopback host, or anywhere with `allow_http` (the
        flag `http_switch` names; None: no switch, http:// elsewhere is always refused)."""
        raw = self.text(name)
        if raw is None:
            return None
        return self._https(name, raw, allow_http=allow_http, http_switch=http_switch)

    def _https(
        self,
        name: str,
        raw: str,
        *,
        allow_http: bool,
        http_switch: str | None,
    ) -> str | None:
        url = EnvironmentReader({name: raw}).url(name, ("http", "https"))
        if url is None:
            self.problems.append(
                f"{name} must be an http or https URL with a host and, if it names a port, a "
                "port from 1 to 65535"
            )
            return None
        if allow_http or urlsplit(url).scheme == "https":
            return url
        host = urlsplit(url).hostname or ""
        try:
            loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            escape = (
                f", or set {http_switch}=1 to send unencrypted on a network you trust"
                if http_switch
                else " (http:// is accepted only to this machine, for development)"
            )
            self.problems.append(
                f"{name} is an http:// URL to a host other than this machine: use https://{escape}"
            )
            return None
        return url


def decimal(value: float) -> str:
    """A bound or default as the configuration table writes it: `0.05`, `100`, `1000000`."""
    if isinstance(value, int):
        return str(value)
    return format(value, "f").rstrip("0").rstrip(".")


def _or(words: list[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


class Reading(ABC):
    """How one variable is read: parsed and bounded (a problem collected by `reader`, never
    raised), and what the configuration table says it takes."""

    @abstractmethod
    def read(self, reader: EnvironmentReader, name: str, default: Any) -> Any:
        """The value of `name`; `default` when it is unset (and, for a number, when refused)."""

    @property
    @abstractmethod
    def takes(self) -> str:
        """What a value may be, in the table's words."""


@dataclass(frozen=True)
class Text(Reading):
    def read(self, reader: EnvironmentReader, name: str, default: Any) -> Any:
        return reader.text(name) or default

    @property
    def takes(self) -> str:
        return "text"


@dataclass(frozen=True)
class Flag(Reading):
    def read(self, reader: EnvironmentReader, name: str, default: Any) -> Any:
        return reader.flag(name, default=default)

    @property
    def takes(self) -> str:
        return "flag"


@dataclass(frozen=True)
class Whole(Reading):
    low: int
    high: int

    def read(self, reader: EnvironmentReader, name: str, default: Any) -> Any:
        return reader.integer(name, default, low=self.low, high=self.high)

    @property
    def takes(self) -> str:
        return f"whole number, {self.low}..{self.high}"


@dataclass(frozen=True)
class Number(Reading):
    low: float
    high: float

    def read(self, reader: EnvironmentReader, name: str, default: Any) -> Any:
        return reader.number(name, default, low=self.low, high=self.high)

    @property
    def takes(self) -> str:
        return f"number, {decimal(self.low)}..{decimal(self.high)}"


@dataclass(frozen=True)
class Url(Reading):
    """A URL of one of `schemes` with a host; a base URL (`base`) loses its trailing `/`."""

    schemes: tuple[str, ...]
    base: bool = False

    def read(self, reader: EnvironmentReader, name: str, default: Any) -> Any:
        value = reader.url(name, self.schemes)
        if value is None:
            return default
        return value.rstrip("/") if self.base else value

    @property
    def takes(self) -> str:
        return "URL: " + _or([f"`{scheme}://`" for scheme in self.schemes])


def _switched_on(reader: EnvironmentReader, switch: str | None) -> bool:
    # the switch is a setting of its own, whose problems its own reading reports
    return switch is not None and EnvironmentReader(reader.environ).flag(switch)


def _https_takes(switch: str | None) -> str:
    anywhere = f", anywhere with `{switch}` on" if switch else ""
    return (
        "`https://` URL; `http://` only to this machine (`localhost`, `127.0.0.0/8`, `::1`)"
        + anywhere
    )


@dataclass(frozen=True)
class HttpsUrl(Reading):
    """An https:// URL; http:// to this machine, or anywhere when the flag `switch` is on."""

    switch: str | None

    def read(self, reader: EnvironmentReader, name: str, default: Any) -> Any:
        allow_http = _switched_on(reader, self.switch)
        return reader.https_url(name, allow_http=allow_http, http_switch=self.switch)

    @property
    def takes(self) -> str:
        return _https_takes(self.switch)


@dataclass(frozen=True)
class TenantUrls(Reading):
    """A JSON object, tenant → URL, each URL as `HttpsUrl(switch)` takes it."""

    switch: str | None

    def read(self, reader: EnvironmentReader, name: str, default: Any) -> Any:
        allow_http = _switched_on(reader, self.switch)
        return reader.tenant_urls(name, allow_http=allow_http, http_switch=self.switch)

    @property
    def takes(self) -> str:
        return "JSON object, tenant → " + _https_takes(self.switch)


@dataclass(frozen=True)
class Secret(Reading):
    """An HS256 key of at least MIN_HS256_SECRET_BYTES, never echoed."""

    def read(self, reader: EnvironmentReader, name: str, default: Any) -> Any:
        return reader.secret(name)

    @property
    def takes(self) -> str:
        return f"secret, at least {MIN_HS256_SECRET_BYTES} bytes"


@dataclass(frozen=True)
class LiveKitSecret(Reading):
    """A secret LiveKit chose: a short one is a warning, never an error."""

    def read(self, reader: EnvironmentReader, name: str, default: Any) -> Any:
        value = reader.text(name)
        reader.short_livekit_secret(name, value)
        return value

    @property
    def takes(self) -> str:
        return (
            f"secret; under {MIN_LIVEKIT_SECRET_BYTES} bytes (LiveKit's dev mode uses `secret`) "
            "is accepted with a warning"
        )


@dataclass(frozen=True)
class LiveKitKeys(Reading):
    """`key:secret,…` pairs of LiveKit's: one warning when any secret is short."""

    def read(self, reader: EnvironmentReader, name: str, default: Any) -> Any:
        pairs = reader.key_pairs(name)
        for _, secret in pairs:
            if reader.short_livekit_secret(name, secret):
                break
        return pairs

    @property
    def takes(self) -> str:
        return f"`key:secret,…`; a secret under {MIN_LIVEKIT_SECRET_BYTES} bytes is a warning"


@dataclass(frozen=True)
class WebhookSecret(Reading):
    """A Standard Webhooks secret, never echoed."""

    def read(self, reader: EnvironmentReader, name: str, default: Any) -> Any:
        return reader.webhook_secret(name)

    @property
    def takes(self) -> str:
        low, high = WEBHOOK_SECRET_BYTES
        return f"`{WEBHOOK_SECRET_PREFIX}` and the base64 of {low} to {high} random bytes"


@dataclass(frozen=True)
class Choices(Reading):
    """A comma list of some of `known` (all of them when unset); `what` names them in a problem."""

    known: tuple[str, ...]
    what: str

    def read(self, reader: EnvironmentReader, name: str, default: Any) -> Any:
        return reader.capabilities(name, self.known, what=self.what)

    @property
    def takes(self) -> str:
        return "comma list, any of " + ", ".join(f"`{choice}`" for choice in self.known)


@dataclass(frozen=True)
class Origins(Reading):
    """A comma list of web origins, or `*`."""

    def read(self, reader: EnvironmentReader, name: str, default: Any) -> Any:
        return reader.origins(name)

    @property
    def takes(self) -> str:
        return "comma list of origins (scheme, host, optional port; no path), or `*`"
