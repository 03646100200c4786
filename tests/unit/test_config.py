"""Cluster settings resolution and config validation (pure, no ZooKeeper)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sparklog.config import (
    PRODUCER_CONFIGS,
    TOPIC_CONFIGS,
    load_properties,
    resolve_cluster_config,
    validate_configs,
    with_defaults,
)
from sparklog.errors import ConfigError


@pytest.fixture(autouse=True)
def _no_project_conf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run in an empty dir so a ``conf/sparklog.properties`` of the checkout never leaks in."""
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)


def write_props(path: Path, **props: str) -> Path:
    path.write_text("# test properties\n" + "".join(f"{k.replace('_', '.')}={v}\n" for k, v in props.items()))
    return path


@pytest.fixture
def props_file(tmp_path: Path) -> Path:
    return write_props(
        tmp_path / "sparklog.properties",
        sparklog_home=str(tmp_path / "from-file"),
        zookeeper_connect="file:2181",
        broker_id="7",
    )


def test_defaults(tmp_path: Path) -> None:
    config = resolve_cluster_config(environ={"HOME": str(tmp_path / "user")})
    assert config.home == str((tmp_path / "user" / ".sparklog").resolve())  # nothing nearer: user-wide
    assert config.log_dir == str(Path(config.home) / "data")
    assert config.zookeeper_connect is None  # embedded server
    assert config.broker_id == 0
    assert config.writer_lease_ms == 10_000
    assert config.zookeeper_session_timeout_ms == 18_000


def test_file_overrides_defaults(props_file: Path, tmp_path: Path) -> None:
    config = resolve_cluster_config(environ={"SPARKLOG_CONF": str(props_file)})
    assert config.home == str(tmp_path / "from-file")
    assert config.zookeeper_connect == "file:2181"
    assert config.broker_id == 7


def test_env_overrides_file(props_file: Path, tmp_path: Path) -> None:
    env = {
        "SPARKLOG_CONF": str(props_file),
        "SPARKLOG_HOME": str(tmp_path / "from-env"),
        "SPARKLOG_ZOOKEEPER": "env:2181",
    }
    config = resolve_cluster_config(environ=env)
    assert config.home == str(tmp_path / "from-env")
    assert config.zookeeper_connect == "env:2181"
    assert config.broker_id == 7  # not in the environment: still from the file


def test_log_dirs_from_the_environment_one_setting_for_a_store(props_file: Path) -> None:
    env = {"SPARKLOG_CONF": str(props_file), "SPARKLOG_LOG_DIRS": "s3://demo-bucket/sparklog/"}
    assert resolve_cluster_config(environ=env).log_dir == "s3://demo-bucket/sparklog"
    assert resolve_cluster_config({"log.dirs": "s3://other/x"}, environ=env).log_dir == "s3://other/x"


def test_explicit_overrides_env(props_file: Path, tmp_path: Path) -> None:
    env = {
        "SPARKLOG_CONF": str(props_file),
        "SPARKLOG_HOME": str(tmp_path / "from-env"),
        "SPARKLOG_ZOOKEEPER": "env:2181",
    }
    config = resolve_cluster_config(
        {"sparklog.home": str(tmp_path / "explicit")}, environ=env, zookeeper_connect="kw:2181"
    )
    assert config.home == str(tmp_path / "explicit")
    assert config.zookeeper_connect == "kw:2181"
    assert config.broker_id == 7


def test_keyword_overrides_mapping_and_none_is_unset(tmp_path: Path) -> None:
    config = resolve_cluster_config(
        {"broker.id": 3, "zookeeper.connect": "map:2181"},
        environ={"SPARKLOG_ZOOKEEPER": "env:2181"},
        broker_id=4,
        zookeeper_connect=None,
    )
    assert config.broker_id == 4
    assert config.zookeeper_connect == "map:2181"


def test_empty_env_values_are_ignored(props_file: Path, tmp_path: Path) -> None:
    config = resolve_cluster_config(
        environ={"SPARKLOG_CONF": str(props_file), "SPARKLOG_HOME": "", "SPARKLOG_ZOOKEEPER": ""}
    )
    assert config.home == str(tmp_path / "from-file")
    assert config.zookeeper_connect == "file:2181"


def test_project_conf_file_in_working_dir_is_read(tmp_path: Path) -> None:
    Path("conf").mkdir()
    write_props(Path("conf/sparklog.properties"), broker_id="5")
    assert resolve_cluster_config(environ={}).broker_id == 5
    explicit_file = write_props(tmp_path / "x.properties", broker_id="6")
    assert resolve_cluster_config(environ={"SPARKLOG_CONF": str(explicit_file)}).broker_id == 6  # SPARKLOG_CONF wins


def test_relative_paths_become_absolute(tmp_path: Path) -> None:
    config = resolve_cluster_config({"sparklog.home": "rel/home", "log.dirs": "rel/logs"}, environ={})
    assert Path(config.home).is_absolute() and Path(config.log_dir).is_absolute()
    assert config.home == str(tmp_path / "cwd" / "rel" / "home")
    assert config.log_dir == str(tmp_path / "cwd" / "rel" / "logs")
    from_env = resolve_cluster_config(environ={"SPARKLOG_HOME": "envrel"})
    assert from_env.home == str(tmp_path / "cwd" / "envrel")
    assert from_env.log_dir == str(tmp_path / "cwd" / "envrel" / "data")


def test_options_round_trip(tmp_path: Path) -> None:
    config = resolve_cluster_config(
        {"sparklog.home": str(tmp_path), "zookeeper.connect": "h:1/c", "broker.rack": "r1"}, environ={}
    )
    assert resolve_cluster_config(config.to_options(), environ={}) == config


def test_log_retention_check_interval_is_kafkas_and_settable() -> None:
    assert resolve_cluster_config({}, environ={}).log_retention_check_interval_ms == 300_000
    config = resolve_cluster_config({"log.retention.check.interval.ms": "500"}, environ={})
    assert config.log_retention_check_interval_ms == 500
    assert resolve_cluster_config(config.to_options(), environ={}) == config


@pytest.mark.parametrize("key", ["unknown.key", "unknown_key", "zookeeper.conect", "home"])
def test_unknown_explicit_key_is_named(key: str) -> None:
    with pytest.raises(ConfigError, match=f"'{key}'"):
        resolve_cluster_config({key: "x"}, environ={})
    kwarg = key.replace(".", "_")
    with pytest.raises(ConfigError, match=f"'{kwarg}'"):
        overrides: dict[str, Any] = {kwarg: "x"}
        resolve_cluster_config(environ={}, **overrides)


def test_unknown_key_in_properties_file_is_named(tmp_path: Path) -> None:
    path = write_props(tmp_path / "bad.properties", sparklog_home="/x", bogus_setting="1")
    with pytest.raises(ConfigError, match=r"bogus\.setting") as info:
        resolve_cluster_config(environ={"SPARKLOG_CONF": str(path)})
    assert str(path) in str(info.value)


def test_missing_or_malformed_properties_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope.properties"):
        resolve_cluster_config(environ={"SPARKLOG_CONF": str(tmp_path / "nope.properties")})
    bad = tmp_path / "bad.properties"
    bad.write_text("sparklog.home=/x\njust words\n")
    with pytest.raises(ConfigError, match=":2:"):
        load_properties(bad)


def test_properties_syntax(tmp_path: Path) -> None:
    path = tmp_path / "p.properties"
    path.write_text("# comment\n! also comment\n\n a.b = 1 \nc:d\ne=f=g\nempty=\n")
    assert load_properties(path) == {"a.b": "1", "c": "d", "e": "f=g", "empty": ""}


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("broker.id", "-1"),
        ("broker.id", "abc"),
        ("zookeeper.session.timeout.ms", "10"),
        ("writer.lease.ms", "1.5"),
        ("log.retention.check.interval.ms", "0"),
        ("log.retention.check.interval.ms", "5m"),
    ],
)
def test_bad_cluster_values(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        resolve_cluster_config({key: value}, environ={})


# -- topic and client configs --------------------------------------------------------------
@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("retention.ms", "abc"),
        ("retention.ms", -2),
        ("retention.ms", 1.5),
        ("retention.ms", True),
        ("cleanup.policy", "nope"),
        ("cleanup.policy", "delete,delete"),
        ("cleanup.policy", "delete,,nope"),
        ("message.timestamp.type", "x"),
        ("message.timestamp.type", "createtime"),
        ("min.insync.replicas", 0),
        ("min.insync.replicas", "0"),
        ("max.message.bytes", -1),
        ("segment.bytes", 1),
        ("compression.type", "brotli"),
        ("min.cleanable.dirty.ratio", "1.5"),
        ("min.cleanable.dirty.ratio", "nan"),
    ],
)
def test_bad_topic_values_name_key_and_allowed(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")) as info:
        validate_configs({key: value}, TOPIC_CONFIGS, "topic")
    assert "allowed" in str(info.value)


def test_unknown_topic_key_lists_allowed_keys() -> None:
    with pytest.raises(ConfigError, match=r"retention.mss") as info:
        validate_configs({"retention.mss": 1}, TOPIC_CONFIGS, "topic")
    assert "retention.ms" in str(info.value).split("Allowed keys:")[1]


def test_topic_values_are_parsed() -> None:
    parsed = validate_configs(
        {
            "retention_ms": "-1",
            "cleanup.policy": "delete, compact",
            "min.insync.replicas": 2,
            "message.timestamp.type": "LogAppendTime",
        },
        TOPIC_CONFIGS,
        "topic",
    )
    assert parsed == {
        "retention.ms": -1,
        "cleanup.policy": "compact,delete",
        "min.insync.replicas": 2,
        "message.timestamp.type": "LogAppendTime",
    }
    effective = with_defaults(parsed, TOPIC_CONFIGS)
    assert set(effective) == set(TOPIC_CONFIGS)
    assert effective["max.message.bytes"] == 1_048_588


@pytest.mark.parametrize("acks", ["0", "1", "all", "-1", 0, 1, -1])
def test_producer_acks_accepts_kafka_spellings(acks: object) -> None:
    assert str(validate_configs({"acks": acks}, PRODUCER_CONFIGS, "producer")["acks"]) == str(acks)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("acks", "2"),
        ("acks", True),
        ("linger.ms", -1),
        ("enable.idempotence", "maybe"),
        ("metadata.max.age.ms", -1),
        ("metadata.max.age.ms", "soon"),
        ("bogus", 1),
    ],
)
def test_bad_producer_configs(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=key):
        validate_configs({key: value}, PRODUCER_CONFIGS, "producer")


def test_producer_metadata_max_age_default_is_kafkas() -> None:
    assert with_defaults({}, PRODUCER_CONFIGS)["metadata.max.age.ms"] == 300_000
    assert validate_configs({"metadata_max_age_ms": 0}, PRODUCER_CONFIGS, "producer") == {"metadata.max.age.ms": 0}


def test_listeners_parsed_and_advertised_defaults_to_listeners() -> None:
    from sparklog.config import Endpoint, resolve_cluster_config

    config = resolve_cluster_config({"listeners": "PLAINTEXT://127.0.0.1:19092"}, environ={})
    assert config.listeners == (Endpoint("PLAINTEXT", "127.0.0.1", 19092),)
    assert config.advertised_listeners == config.listeners
    assert resolve_cluster_config({}, environ={}).listeners == (Endpoint("PLAINTEXT", "127.0.0.1", 9092),)


@pytest.mark.parametrize(
    "value",
    [
        "127.0.0.1:9092",
        "PLAINTEXT://127.0.0.1",
        "PLAINTEXT://h:70000",
        "SSL://h:9093",
        "PLAINTEXT://a:1,PLAINTEXT://b:2",
    ],
)
def test_bad_listeners_name_the_key(value: str) -> None:
    from sparklog.config import resolve_cluster_config
    from sparklog.errors import ConfigError

    with pytest.raises(ConfigError, match=r"advertised\.listeners"):
        resolve_cluster_config({"advertised.listeners": value}, environ={})


def test_a_store_uri_log_dir_and_storage_settings_are_kept_as_given(tmp_path: Path) -> None:
    """An object-store log dir is not a path relative to the properties file (DESIGN §16),
    and the storage.* settings travel with the cluster's options (to Spark tasks, agents)."""
    props = write_props(
        tmp_path / "sparklog.properties",
        log_dirs="s3://lake/sparklog/",
        storage_endpoint="http://127.0.0.1:9000",
        storage_allow_http="true",
    )
    config = resolve_cluster_config(environ={"SPARKLOG_CONF": str(props), "HOME": str(tmp_path)})
    assert config.log_dir == "s3://lake/sparklog"
    assert dict(config.storage) == {"storage.endpoint": "http://127.0.0.1:9000", "storage.allow.http": "true"}
    options = config.to_options()
    assert options["log.dirs"] == "s3://lake/sparklog" and options["storage.endpoint"] == "http://127.0.0.1:9000"
    assert resolve_cluster_config(options, environ={"HOME": str(tmp_path)}) == config


def test_bad_store_uris_and_storage_keys_are_refused(tmp_path: Path) -> None:
    environ = {"HOME": str(tmp_path)}
    with pytest.raises(ConfigError, match="scheme 'hdfs' is not supported"):
        resolve_cluster_config({"log.dirs": "hdfs://namenode/dir"}, environ=environ)
    with pytest.raises(ConfigError, match=r"Unknown sparklog configuration 'storage\.endpoint\.url'"):
        resolve_cluster_config({"storage.endpoint.url": "http://x"}, environ=environ)
