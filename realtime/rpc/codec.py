"""A codec per A2A generation; `rpc/dispatch` runs one pipeline for all of them.

A codec names its methods (its name → the 1.0 method and its `MethodSpec`), turns its params
into the 1.0 params JSON, writes results, stream events and error objects in its generation's
shapes (an error's message in its generation's `Words`), and says which header names carry
extensions. 1.0 and 0.3 share `POST /a2a` and are
chosen per request (`Dispatcher`: by A2A-Version and method name); 0.1 is the one codec of
`POST /a2a/v0.1` (`rpc/v01`). Codecs with state (the 0.1 ids) are made per call.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any, ClassVar, Final, NamedTuple

import msgspec

from realtime.a2a import v03
from realtime.a2a.params import Params
from realtime.errors import V10_WORDS, MethodNotFound, ServiceError, Words
from realtime.methods.context import Call, MethodDeps
from realtime.rpc.errors import error_object
from realtime.rpc.registry import METHODS, OFFERED, SUPPORTED_VERSIONS, Handler, MethodSpec


class Resolved(NamedTuple):
    """A method a codec serves: the 1.0 method it runs as, and that method's spec."""

    target: str
    spec: MethodSpec


class Codec(abc.ABC):
    """One A2A generation's wire: the 1.0 shapes are the defaults."""

    version: ClassVar[str]
    # the request headers read for extensions, and the response headers that echo them
    extension_headers: ClassVar[tuple[str, ...]] = ("A2A-Extensions",)
    # False: the echo waits for the params (a 0.1 part may activate the realtime extension)
    echo_before_params: ClassVar[bool] = True
    # the SSE event name of a failure after the first event (None: a plain `data:` event)
    error_event: ClassVar[str | None] = "error"

    @abc.abstractmethod
    def resolve(self, method: str) -> Resolved | None:
        """The method `method` names in this generation, or None when it names none."""

    @abc.abstractmethod
    def unknown(self, method: str) -> ServiceError:
        """The error for a method `resolve` does not know (-32601, or a hint to move)."""

    def params(self, method: str, raw: bytes) -> bytes:
        """The 1.0 params JSON of `method`'s params `raw` (checked in this generation's terms;
        -32602 names the request's own paths)."""
        return raw

    def implied_extensions(self, params: Params) -> frozenset[str]:
        """Extensions active for these (decoded, 1.0) params without the header saying so."""
        return frozenset()

    async def invoke(self, methods: MethodDeps, handler: Handler, call: Call[Any]) -> Any:
        """Run the method's handler for the call (it takes its family's dependencies)."""
        return await handler(methods, call)

    def result(self, target: str, value: Any) -> Any:
        """A unary 1.0 result of `target` in this generation's shape."""
        return value

    def events(self, value: Any) -> list[Any]:
        """The stream events one 1.0 StreamResponse (as builtins) becomes."""
        return [value]

    @property
    def words(self) -> Words:
        """How this generation says the terms of an error's message."""
        return V10_WORDS

    def error(self, error: ServiceError) -> dict[str, Any]:
        """The JSON-RPC error object of `error` in this generation's form and words."""
        return error_object(error, self.words)

    def extensions(self, headers: Mapping[str, str]) -> frozenset[str]:
        """The extensions the request lists (in any of this generation's headers)."""
        raw = ",".join(headers.get(name.lower(), "") for name in self.extension_headers)
        return frozenset(item.strip() for item in raw.split(",") if item.strip())

    def echo(self, active: frozenset[str]) -> dict[str, str]:
        """The response headers naming the activated extensions."""
        value = ", ".join(sorted(active))
        return dict.fromkeys(self.extension_headers, value)


class V10Codec(Codec):
    """A2A 1.0: the method table as it is, the 1.0 shapes."""

    version = SUPPORTED_VERSIONS[-1]

    def resolve(self, method: str) -> Resolved | None:
        spec = METHODS.get(method)
        return None if spec is None else Resolved(method, spec)

    def unknown(self, method: str) -> ServiceError:
        if method in v03.METHODS:
            return MethodNotFound(
                f"{method} is an A2A 0.3 method; with A2A-Version {self.version} call "
                f"{v03.METHODS[method]}, or send it without A2A-Version for the 0.3 shapes.",
                details={"method": method},
            )
        return MethodNotFound(
            f"Method {method!r} does not exist. Methods: {', '.join(OFFERED)}.",
            details={"method": method},
        )


# the 0.3 names a caller can use, and the 1.0 ones only A2A-Version 1.0 reaches
OFFERED_V03: Final = tuple(name for name, target in v03.METHODS.items() if target in OFFERED)
ONLY_V10: Final = tuple(name for name in OFFERED if name not in v03.METHODS.values())


class V03Codec(Codec):
    """A2A 0.3 (no A2A-Version, or 0.3): `a2a/v03` maps the shapes both ways."""

    version = v03.VERSION
    extension_headers = ("A2A-Extensions", "X-A2A-Extensions")  # 0.3 named it X-A2A-Extensions

    def resolve(self, method: str) -> Resolved | None:
        target = v03.METHODS.get(method)
        return None if target is None else Resolved(target, METHODS[target])

    def unknown(self, method: str) -> ServiceError:
        return MethodNotFound(
            f"Method {method!r} does not exist in A2A 0.3. Methods: {', '.join(OFFERED_V03)}; "
            f"with the header A2A-Version: {SUPPORTED_VERSIONS[-1]} also {', '.join(ONLY_V10)}.",
            details={"method": method},
        )

    def params(self, method: str, raw: bytes) -> bytes:
        return v03.to_v10_params(method, raw)

    def result(self, target: str, value: Any) -> Any:
        return v03.result(target, msgspec.to_builtins(value))

    def events(self, value: Any) -> list[Any]:
        return [v03.stream_result(value)]

    @property
    def words(self) -> Words:
        return v03.WORDS

    def error(self, error: ServiceError) -> dict[str, Any]:
        return v03.error(error_object(error, self.words))


V10: Final = V10Codec()
V03: Final = V03Codec()
