"""Every served API's handler declares what it reads of the request body: its ``request``
is ``ApiRequest[<a protocol over kio's request classes>]``, never the untyped ``ApiRequest``
(``ApiRequest[Any]``), so mypy checks each handler's reads of the body."""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Any

from sparklog.broker.kafka.apis import _APIS
from sparklog.broker.kafka.context import ApiRequest


def _served_handlers() -> list[Callable[..., Any]]:
    handlers: list[Callable[..., Any]] = []
    for api in _APIS.values():
        handlers.append(api.handle)
        if api.start is not None:
            handlers.append(api.start)
    return handlers


def _untyped_request(handler: Callable[..., Any]) -> str | None:
    """Why ``handler``'s request is untyped; None when it names the body it reads."""
    annotation = typing.get_type_hints(handler).get("request")
    if annotation is None:
        return "has no annotated `request` parameter"
    if annotation is ApiRequest:
        return "takes an untyped request: ApiRequest (its body is Any)"
    if typing.get_origin(annotation) is not ApiRequest:
        return f"takes request: {annotation!r}, not ApiRequest[<body protocol>]"
    (body,) = typing.get_args(annotation)
    if body is Any:
        return "takes an untyped request: ApiRequest[Any]"
    return None


def test_every_served_handler_types_its_request_body() -> None:
    handlers = _served_handlers()
    assert handlers, "apis._APIS serves no API: nothing was checked"
    untyped = [
        f"{handler.__module__}.{handler.__qualname__} {reason}"
        for handler in handlers
        if (reason := _untyped_request(handler)) is not None
    ]
    assert not untyped, "handlers that read an untyped request body:\n" + "\n".join(untyped)
