"""Network endpoints in Kafka's notation: ``listeners`` / ``advertised.listeners``
(``NAME://host:port``) and clients' ``bootstrap.servers`` (``host:port,...``). Pure parsing;
bad values raise errors naming the setting."""

from __future__ import annotations

from dataclasses import dataclass

from sparklog.errors import ConfigError

__all__ = ["SUPPORTED_SECURITY_PROTOCOLS", "Endpoint", "parse_bootstrap_servers", "parse_listeners"]


def parse_bootstrap_servers(raw: str) -> list[tuple[str, int]]:
    """Kafka's ``bootstrap.servers``: ``host:port[,host:port...]`` (IPv6 hosts in brackets)."""
    servers: list[tuple[str, int]] = []
    for part in str(raw).split(","):
        part = part.strip()
        if not part:
            continue
        host, sep, port = part.rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(part)
        servers.append((host, int(port)))
    if not servers:
        raise ValueError(raw)
    return servers


@dataclass(frozen=True)
class Endpoint:
    """One ``NAME://host:port`` of ``listeners`` / ``advertised.listeners``; an empty host
    binds every interface (Kafka's rule)."""

    name: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


# Only plaintext is served; TLS and SASL listeners are refused instead of silently served in clear.
SUPPORTED_SECURITY_PROTOCOLS = ("PLAINTEXT",)


def parse_listeners(key: str, value: str) -> tuple[Endpoint, ...]:
    """Parse a comma-separated ``NAME://host:port`` list; ``ConfigError`` naming ``key`` when bad."""
    endpoints: list[Endpoint] = []
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        name, sep, address = item.partition("://")
        host, colon, port_text = address.rpartition(":")
        if not sep or not colon or not name:
            raise ConfigError(
                f"Invalid value {item!r} in {key}: expected NAME://host:port, e.g. PLAINTEXT://127.0.0.1:9092"
            )
        if name.upper() not in SUPPORTED_SECURITY_PROTOCOLS:
            raise ConfigError(
                f"Invalid listener {item!r} in {key}: security protocol {name} is not supported "
                f"(supported: {', '.join(SUPPORTED_SECURITY_PROTOCOLS)})"
            )
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
            raise ConfigError(f"Invalid port {port_text!r} of listener {item!r} in {key}: expected 0..65535")
        if any(e.name == name.upper() for e in endpoints):
            raise ConfigError(f"Listener name {name.upper()} appears twice in {key}: each name must be unique")
        endpoints.append(Endpoint(name.upper(), host, int(port_text)))
    return tuple(endpoints)
