"""Reading the environment: typed values, each problem collected before failing, warnings
for what is acceptable but worth saying (`Settings.from_env` is the one user)."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

MIN_HS256_SECRET_BYTES = 32
# LiveKit's secrets are LiveKit's to choose (its dev mode uses `secret`): shorter than this is a
# warning, never an error
MIN_LIVEKIT_SECRET_BYTES = 32


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

    def capabilities(self, name: str, known: tuple[str, ...]) -> frozenset[str]:
        raw = self.text(name)
        if raw is None:
            return frozenset(known)
        names = {item.strip() for item in raw.split(",") if item.strip()}
        if not names:
            self.problems.append(f"{name} must list at least one capability")
        unknown = sorted(names - set(known))
        if unknown:
            self.problems.append(
                f"{name} has unknown capabilities {', '.join(unknown)}; known: {', '.join(known)}"
            )
        return frozenset(names & set(known))
