"""The configuration layer: sources, symbol keys, environment, extra_config, validation."""

from __future__ import annotations

import dataclasses
import pickle
import textwrap
from collections.abc import Mapping
from pathlib import Path

import pytest
import yaml

from vmpooler.actors.config import (
    Config,
    ConfigError,
    ConfigProblem,
    PoolConfig,
    ProviderConfig,
    load_config,
    render_config,
)

MINIMAL = """\
:config:
  task_limit: 7
:providers:
  :dummy:
    provider_class: 'dummy'
:dns_configs:
  :local:
    dns_class: 'dynamic-dns'
    domain: 'vmpooler.test'
:pools:
  - name: 'pool1'
    alias: ['first', 'shared']
    size: 2
    dns_plugin: 'local'
  - name: 'pool2'
    alias: 'shared'
    template: 'templates/pool2'
    size: 1
"""


def write(directory: Path, text: str, name: str = "vmpooler.yaml") -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(text))
    return path


def load(
    directory: Path, text: str, environ: Mapping[str, str] | None = None, **kwargs: object
) -> Config:
    path = write(directory, text)
    return load_config(path, environ=environ or {}, cwd=directory, **kwargs)  # type: ignore[arg-type]


def problems(directory: Path, text: str, environ: Mapping[str, str] | None = None,
             **kwargs: object) -> tuple[ConfigProblem, ...]:
    with pytest.raises(ConfigError) as caught:
        load(directory, text, environ, **kwargs)
    return caught.value.problems


def only(found: tuple[ConfigProblem, ...]) -> ConfigProblem:
    assert len(found) == 1, found
    return found[0]


def line_of(text: str, marker: str) -> int:
    """1-based number of the first line of ``text`` containing ``marker``."""
    for number, line in enumerate(textwrap.dedent(text).splitlines(), start=1):
        if marker in line:
            return number
    raise AssertionError(marker)


# --- sources ------------------------------------------------------------------------------


def test_explicit_path_wins_over_every_other_source(tmp_path: Path) -> None:
    explicit = write(tmp_path, ":config:\n  task_limit: 1\n", "explicit.yaml")
    named = write(tmp_path, ":config:\n  task_limit: 3\n", "named.yaml")
    write(tmp_path, ":config:\n  task_limit: 4\n")
    environ = {"VMPOOLER_CONFIG": ":config:\n  task_limit: 2\n", "VMPOOLER_CONFIG_FILE": str(named)}
    config = load_config(explicit, environ=environ, cwd=tmp_path)
    assert config.settings.task_limit == 1
    assert config.source == str(explicit)


def test_vmpooler_config_document_wins_over_file_variable(tmp_path: Path) -> None:
    named = write(tmp_path, ":config:\n  task_limit: 3\n", "named.yaml")
    environ = {"VMPOOLER_CONFIG": ":config:\n  task_limit: 2\n", "VMPOOLER_CONFIG_FILE": str(named)}
    config = load_config(environ=environ, cwd=tmp_path)
    assert config.settings.task_limit == 2
    assert config.source == "environment variable VMPOOLER_CONFIG"


def test_config_file_variable_wins_over_cwd_file(tmp_path: Path) -> None:
    write(tmp_path, ":config:\n  task_limit: 3\n", "named.yaml")
    write(tmp_path, ":config:\n  task_limit: 4\n")
    config = load_config(environ={"VMPOOLER_CONFIG_FILE": "named.yaml"}, cwd=tmp_path)
    assert config.settings.task_limit == 3
    assert config.source == str(tmp_path / "named.yaml")


def test_cwd_file_wins_over_bundled(tmp_path: Path) -> None:
    write(tmp_path, ":config:\n  task_limit: 4\n")
    config = load_config(environ={}, cwd=tmp_path)
    assert config.settings.task_limit == 4
    assert config.source == str(tmp_path / "vmpooler.yaml")


def test_bundled_config_is_the_last_resort(tmp_path: Path) -> None:
    config = load_config(environ={}, cwd=tmp_path)
    assert config.source.endswith("vmpooler.yaml")
    assert Path(config.source).parent.name == "conf"
    assert config.pool_names == ("debian-12-x86_64", "ubuntu-2404-x86_64", "centos-9-x86_64")


def test_missing_explicit_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path / "nope.yaml", environ={}, cwd=tmp_path)
    problem = only(caught.value.problems)
    assert problem.source == str(tmp_path / "nope.yaml")
    assert "cannot read" in problem.message


def test_problems_in_vmpooler_config_name_the_variable(tmp_path: Path) -> None:
    environ = {"VMPOOLER_CONFIG": ":config:\n  task_limit: ten\n"}
    with pytest.raises(ConfigError) as caught:
        load_config(environ=environ, cwd=tmp_path)
    problem = only(caught.value.problems)
    assert (problem.source, problem.line) == ("VMPOOLER_CONFIG", 2)
    assert problem.key == "config.task_limit"


# --- keys ------------------------------------------------------------------------------------


def test_symbol_and_plain_keys_give_the_same_config(tmp_path: Path) -> None:
    plain = MINIMAL.replace(":config:", "config:").replace(":pools:", "pools:")
    plain = plain.replace(":providers:", "providers:").replace(":dummy:", "dummy:")
    plain = plain.replace(":dns_configs:", "dns_configs:").replace(":local:", "local:")
    assert ":" + "config" not in plain
    symbolic = load(tmp_path, MINIMAL)
    written = load(tmp_path, plain)
    assert written.pools == symbolic.pools
    assert written.settings == symbolic.settings
    assert written.providers == symbolic.providers
    assert written.raw == symbolic.raw
    assert "config" in written.raw


def test_model_of_a_minimal_config(tmp_path: Path) -> None:
    config = load(tmp_path, MINIMAL)
    assert config.settings.task_limit == 7
    assert config.settings.vm_lifetime == 24
    assert config.redis.embedded
    pool1 = config.pool("pool1")
    assert pool1 == PoolConfig(
        name="pool1", size=2, template="pool1", ready_ttl=60, provider="dummy",
        alias=("first", "shared"), dns_plugin="local", domain="vmpooler.test",
        raw=pool1.raw,
    )
    pool2 = config.pool("pool2")
    assert pool2.alias == ("shared",)
    assert pool2.template == "templates/pool2"
    assert pool2.domain is None
    assert config.pool_names == ("pool1", "pool2")
    assert config.aliases == {"first": ("pool1",), "shared": ("pool1", "pool2")}
    assert config.providers["dummy"] == ProviderConfig(
        "dummy", "dummy", {"provider_class": "dummy"}
    )
    assert config.dns_configs["local"].dns_class == "dynamic-dns"
    with pytest.raises(KeyError):
        config.pool("first")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.settings.task_limit = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.raw["config"]["task_limit"] = 1  # type: ignore[index]


def test_pool_extra_keys_are_carried_and_ready_ttl_defaults_from_global(tmp_path: Path) -> None:
    config = load(tmp_path, """\
        :config:
          ready_ttl: 30
        :pools:
          - name: 'a'
            size: 1
            folder: 'vmpooler/a'
          - name: 'b'
            size: 1
            ready_ttl: 5
        """)
    assert config.pool("a").ready_ttl == 30
    assert config.pool("b").ready_ttl == 5
    assert config.pool("a").raw["folder"] == "vmpooler/a"


def test_dummy_provider_is_synthesised_when_not_configured(tmp_path: Path) -> None:
    config = load(tmp_path, ":pools:\n  - name: 'a'\n    size: 1\n")
    assert config.pool("a").provider == "dummy"
    assert config.providers["dummy"] == ProviderConfig("dummy", "dummy", {})
    assert config.settings == dataclasses.replace(config.settings, raw={})


def test_missing_pools_section_gives_no_pools_and_a_note(tmp_path: Path) -> None:
    config = load(tmp_path, ":config:\n  task_limit: 1\n")
    assert config.pools == ()
    assert any(":pools:" in note for note in config.notes)


def test_missing_config_section_means_defaults(tmp_path: Path) -> None:
    config = load(tmp_path, ":pools: []\n")
    assert config.settings.task_limit == 10
    assert config.settings.site_name == "<b>vmpooler</b>"


def test_check_loop_delays_are_clamped_not_rejected(tmp_path: Path) -> None:
    config = load(tmp_path, """\
        :config:
          check_loop_delay_min: 30
          check_loop_delay_max: 10
          check_loop_delay_decay: 0.5
        :pools:
          - name: 'a'
            size: 1
            check_loop_delay_max: 2
        """)
    assert config.settings.check_loop_delay_max == 30
    assert config.settings.check_loop_delay_decay == 2.0
    assert config.pool("a").loop_delays(config.settings) == (30, 30, 2.0)
    assert any("check_loop_delay_max" in note for note in config.notes)


def test_yaml_create_linked_clones_false_is_honoured(tmp_path: Path) -> None:
    config = load(tmp_path, ":config:\n  create_linked_clones: false\n")
    assert config.settings.create_linked_clones is False


# --- environment ------------------------------------------------------------------------------


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    environ = {
        "TASK_LIMIT": "5",
        "EXPERIMENTAL_FEATURES": "false",
        "USAGE_STATS": "Yes",
        "PREFIX": "ci-",
        "READY_TTL": "15",
        "CREATE_LINKED_CLONES": "off",
        "REDIS_SERVER": "redis.example.com",
        "REDIS_PORT": "6380",
        "REDIS_PASSWORD": "hunter2",
        "REDIS_CONNECTION_POOL_TIMEOUT": "2.5",
        "VMPOOLER_REDIS_DATA_DIR": "/srv/redis",
        "STATSD_SERVER": "statsd.example.com",
        "STATSD_PORT": "9125",
        "LOGFILE": "",
    }
    config = load(tmp_path, """\
        :config:
          task_limit: 7
          experimental_features: true
        :pools:
          - name: 'a'
            size: 1
        """, environ)
    settings = config.settings
    assert settings.task_limit == 5
    assert settings.experimental_features is False
    assert settings.usage_stats is True
    assert settings.prefix == "ci-"
    assert settings.logfile is None
    assert settings.create_linked_clones is False
    assert config.pool("a").ready_ttl == 15
    assert settings.raw["task_limit"] == 5
    assert config.redis.server == "redis.example.com"
    assert not config.redis.embedded
    assert (config.redis.port, config.redis.password) == (6380, "hunter2")
    assert config.redis.connection_pool_timeout == 2.5
    assert config.redis.data_dir == "/srv/redis"
    assert (config.metrics.backend, config.metrics.host, config.metrics.port) == (
        "statsd", "statsd.example.com", 9125)


def test_bad_integer_in_environment_names_the_variable(tmp_path: Path) -> None:
    found = problems(tmp_path, ":config:\n  task_limit: 7\n", {"TASK_LIMIT": "5a"})
    problem = only(found)
    assert (problem.source, problem.line, problem.key) == ("TASK_LIMIT", None, "config.task_limit")
    assert "'5a'" in problem.message
    assert str(problem).startswith("TASK_LIMIT: config.task_limit: ")


def test_bad_boolean_in_environment_names_the_variable(tmp_path: Path) -> None:
    problem = only(problems(tmp_path, ":pools: []\n", {"EXPERIMENTAL_FEATURES": "maybe"}))
    assert problem.source == "EXPERIMENTAL_FEATURES"
    assert problem.key == "config.experimental_features"


def test_the_opt_in_to_pool_changes_without_auth_is_a_validated_boolean(tmp_path: Path) -> None:
    problem = only(problems(tmp_path, ":pools: []\n",
                            {"EXPERIMENTAL_FEATURES_WITHOUT_AUTH": "maybe"}))
    assert problem.source == "EXPERIMENTAL_FEATURES_WITHOUT_AUTH"
    assert problem.key == "config.experimental_features_without_auth"
    problem = only(problems(tmp_path, ":config:\n  experimental_features_without_auth: lots\n"))
    assert (problem.line, problem.key) == (2, "config.experimental_features_without_auth")


def test_out_of_range_environment_value_names_the_variable(tmp_path: Path) -> None:
    problem = only(problems(tmp_path, ":config:\n  task_limit: 7\n", {"TASK_LIMIT": "-1"}))
    assert (problem.source, problem.line, problem.key) == ("TASK_LIMIT", None, "config.task_limit")


def test_datadog_variables(tmp_path: Path) -> None:
    config = load(tmp_path, ":statsd:\n  server: 's'\n", {"DD_AGENT_HOST": "agent",
                                                          "DD_DOGSTATSD_PORT": "8126"})
    assert (config.metrics.backend, config.metrics.host, config.metrics.port) == (
        "datadog", "agent", 8126)
    assert config.metrics.prefix == "vmpooler"
    config = load(tmp_path, ":pools: []\n", {"DD_AGENT_HOST": "agent", "DATADOG_HOST": "mine",
                                            "DATADOG_PORT": "1234"})
    assert (config.metrics.host, config.metrics.port) == ("mine", 1234)


def test_legacy_purge_folders_variable(tmp_path: Path) -> None:
    config = load(tmp_path, ":pools: []\n", {"PURGE_UNCONFIGURED_FOLDERS": "true"})
    assert config.settings.purge_unconfigured_resources is True
    assert any("PURGE_UNCONFIGURED_FOLDERS" in note for note in config.notes)


def test_process_level_variables(tmp_path: Path) -> None:
    config = load(tmp_path, ":pools: []\n", {"PORT": "8080", "APP_ENV": "production",
                                            "VMPOOLER_DEBUG": "true"})
    assert (config.api_port, config.app_env, config.debug) == (8080, "production", True)
    assert load(tmp_path, ":pools: []\n").debug is False


def test_domain_is_fatal_in_yaml_and_environment(tmp_path: Path) -> None:
    text = ":config:\n  task_limit: 1\n  domain: 'example.com'\n"
    problem = only(problems(tmp_path, text))
    assert (problem.line, problem.key) == (3, "config.domain")
    assert ":dns_configs:" in problem.message
    problem = only(problems(tmp_path, ":pools: []\n", {"DOMAIN": "example.com"}))
    assert problem.source == "DOMAIN"


def test_dummy_auth_needs_vmpooler_debug(tmp_path: Path) -> None:
    text = ":auth:\n  provider: 'dummy'\n"
    problem = only(problems(tmp_path, text))
    assert (problem.line, problem.key) == (2, "auth.provider")
    assert "VMPOOLER_DEBUG" in problem.message
    config = load(tmp_path, text, {"VMPOOLER_DEBUG": "1"})
    assert config.auth == {"provider": "dummy"}


def test_auth_provider_from_environment(tmp_path: Path) -> None:
    config = load(tmp_path, ":pools: []\n", {
        "AUTH_PROVIDER": "ldap", "LDAP_HOST": "ldap.example.com", "LDAP_PORT": "636",
        "LDAP_BASE": "ou=users,dc=example,dc=com", "LDAP_USER_OBJECT": "uid",
    })
    assert config.auth is not None
    assert config.auth["ldap"]["host"] == "ldap.example.com"
    assert config.auth["ldap"]["port"] == 636


# --- extra_config -----------------------------------------------------------------------------

EXTRA = """\
:config:
  task_limit: 99
  vm_lifetime: 12
:pools:
  - name: 'extra1'
    size: 3
:tagfilter:
  url: '(.*)'
"""


def test_extra_config_merge_rules(tmp_path: Path) -> None:
    write(tmp_path, EXTRA, "extra.yaml")
    config = load(tmp_path, MINIMAL.replace("  task_limit: 7\n",
                                            "  task_limit: 7\n  extra_config: 'extra.yaml'\n"))
    assert config.settings.task_limit == 7          # scalar already present: kept
    assert config.settings.vm_lifetime == 12        # new key: added
    assert config.pool_names == ("pool1", "pool2", "extra1")  # lists concatenate
    assert config.tagfilter == {"url": "(.*)"}


def test_extra_config_from_environment_and_located_problems(tmp_path: Path) -> None:
    bad = "# extra pools\n:pools:\n  - name: 'x'\n    size: -3\n"
    write(tmp_path, bad, "bad.yaml")
    write(tmp_path, EXTRA, "extra.yaml")
    found = problems(tmp_path, MINIMAL, {"EXTRA_CONFIG": "extra.yaml, bad.yaml"})
    problem = only(found)
    assert problem.source == str(tmp_path / "bad.yaml")
    assert (problem.line, problem.key) == (4, "pools[3].size")


def test_unreadable_extra_config(tmp_path: Path) -> None:
    problem = only(problems(tmp_path, ":config:\n  extra_config: 'missing.yaml'\n"))
    assert (problem.line, problem.key) == (2, "config.extra_config")
    assert "missing.yaml" in problem.message


# --- validation -------------------------------------------------------------------------------


def test_yaml_syntax_error_reports_file_and_line(tmp_path: Path) -> None:
    text = ":config:\n  task_limit: 1\n  bad: [unclosed\n:pools: []\n"
    problem = only(problems(tmp_path, text))
    assert problem.source == str(tmp_path / "vmpooler.yaml")
    assert problem.line is not None and problem.line >= 3
    assert "invalid YAML" in problem.message


@pytest.mark.parametrize("text", ["- a\n- b\n", "just a string\n", ""])
def test_document_must_be_a_mapping(tmp_path: Path, text: str) -> None:
    problem = only(problems(tmp_path, text))
    assert problem.key == "<document>"
    assert "mapping" in problem.message


def test_config_section_must_be_a_mapping(tmp_path: Path) -> None:
    problem = only(problems(tmp_path, ":pools: []\n:config:\n  - task_limit\n"))
    assert (problem.line, problem.key) == (2, "config")


@pytest.mark.parametrize(("value", "shown"), [("-1", "-1"), ("five", "'five'"), ("1.5", "1.5"),
                                              ("true", "true")])
def test_pool_size_must_be_a_non_negative_integer(tmp_path: Path, value: str, shown: str) -> None:
    text = f":pools:\n  - name: 'a'\n    size: 1\n  - name: 'b'\n    size: {value}\n"
    problem = only(problems(tmp_path, text))
    assert (problem.line, problem.key) == (5, "pools[1].size")
    assert problem.message == f"expected an integer >= 0, got {shown}"


def test_pool_without_name_or_size(tmp_path: Path) -> None:
    text = """\
        :pools:
          - name: 'a'
            size: 1
          - size: 2
          - name: 'c'
            template: 'c'
        """
    found = problems(tmp_path, text)
    assert [(p.line, p.key, p.message) for p in found] == [
        (4, "pools[1].name", "required key is missing"),
        (5, "pools[2].size", "required key is missing"),
    ]


def test_unknown_provider_and_provider_class_and_dns_plugin(tmp_path: Path) -> None:
    text = """\
        :providers:
          :cloud:
            provider_class: 'nimbus'
        :pools:
          - name: 'a'
            size: 1
            provider: 'vsphere'
          - name: 'b'
            size: 1
            provider: 'cloud'
            dns_plugin: 'nowhere'
        """
    found = {p.key: p for p in problems(tmp_path, text, known_provider_classes={"dummy"})}
    assert set(found) == {"providers.cloud.provider_class", "pools[0].provider",
                          "pools[1].dns_plugin"}
    assert found["providers.cloud.provider_class"].line == line_of(text, "nimbus")
    assert "nimbus" in found["providers.cloud.provider_class"].message
    assert found["pools[0].provider"].line == line_of(text, "'vsphere'")
    assert "vsphere" in found["pools[0].provider"].message
    assert found["pools[1].dns_plugin"].line == line_of(text, "nowhere")


def test_provider_class_matches_entry_points_case_insensitively(tmp_path: Path) -> None:
    text = ":providers:\n  :mine:\n    provider_class: 'DUMMY'\n:pools:\n"
    text += "  - name: 'a'\n    size: 1\n    provider: 'mine'\n"
    config = load(tmp_path, text)  # entry points of the installed package
    assert config.providers["mine"].provider_class == "dummy"


def test_duplicate_pool_names_and_bad_aliases(tmp_path: Path) -> None:
    text = """\
        :pools:
          - name: 'a'
            size: 1
          - name: 'b'
            size: 1
            alias: 7
          - name: 'a'
            size: 1
        """
    found = {p.key: p for p in problems(tmp_path, text)}
    assert set(found) == {"pools[1].alias", "pools[2].name"}
    assert found["pools[1].alias"].line == 6
    assert "string or a list of strings" in found["pools[1].alias"].message
    assert found["pools[2].name"].line == 7
    assert "duplicate" in found["pools[2].name"].message


# vmpooler's own integration-spec pools (spec/integration): 'pool2' is a pool and an alias of
# 'pool1'; 'genericpool' is an alias of two pools. Ruby vmpooler runs with it.
INTEGRATION_SPEC_POOLS = """\
    :pools:
      - name: 'pool1'
        size: 5
        alias: ['poolone', 'pool2', 'genericpool']
      - name: 'pool2'
        size: 5
      - name: 'pool3'
        size: 5
        alias: 'genericpool'
    """


def test_a_pool_name_may_also_be_an_alias_with_a_note(tmp_path: Path) -> None:
    config = load(tmp_path, INTEGRATION_SPEC_POOLS)
    assert config.pool_names == ("pool1", "pool2", "pool3")
    assert dict(config.aliases) == {"poolone": ("pool1",), "pool2": ("pool1",),
                                    "genericpool": ("pool1", "pool3")}
    clash = [note for note in config.notes if "'pool2' is also the name of a pool" in note]
    assert len(clash) == 1 and "pools[0].alias" in clash[0]


@pytest.mark.parametrize(("setting", "value", "message"), [
    ("task_limit", "ten", "expected an integer >= 0, got 'ten'"),
    ("task_limit", "-2", "expected an integer >= 0, got -2"),
    ("vm_lifetime", "1.5", "expected an integer >= 0, got 1.5"),
    ("experimental_features", "perhaps", "expected true or false"),
    ("check_loop_delay_min", "0", "expected a number > 0, got 0"),
    ("site_name", "[1]", "expected a string, got a list"),
])
def test_global_settings_of_the_wrong_type(tmp_path: Path, setting: str, value: str,
                                           message: str) -> None:
    text = f":config:\n  prefix: 'x'\n  {setting}: {value}\n"
    problem = only(problems(tmp_path, text))
    assert (problem.line, problem.key) == (3, f"config.{setting}")
    assert problem.message.startswith(message)
    assert str(problem) == f"{tmp_path / 'vmpooler.yaml'}:3: config.{setting}: {problem.message}"


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    text = """\
        :config:
          task_limit: ten
          ready_ttl: -1
        :tagfilter:
          url: '(unclosed'
        :pools:
          - name: 'a'
            size: five
        """
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, text)
    keys = [p.key for p in caught.value.problems]
    assert keys == ["config.task_limit", "config.ready_ttl", "pools[0].size", "tagfilter.url"]
    assert len(str(caught.value).splitlines()) == 4
    assert caught.value.problems[3].line == 5


def test_metrics_precedence_and_prometheus_note(tmp_path: Path) -> None:
    config = load(tmp_path, """\
        :graphite:
          server: 'graphite'
        :statsd:
          server: 'statsd'
          prefix: 'vmp'
        :prometheus:
          prefix: 'x'
        """)
    assert (config.metrics.backend, config.metrics.host, config.metrics.port,
            config.metrics.prefix) == ("statsd", "statsd", 8125, "vmp")
    assert any("prometheus" in note for note in config.notes)
    config = load(tmp_path, ":graphite:\n  server: 'g'\n")
    assert (config.metrics.backend, config.metrics.port) == ("graphite", 2003)
    config = load(tmp_path, ":datadog:\n  tags:\n    env: 'prod'\n")
    assert (config.metrics.backend, config.metrics.host, config.metrics.tags) == (
        "datadog", "127.0.0.1", ("env:prod",))
    problem = only(problems(tmp_path, ":statsd:\n  port: 1\n"))
    assert problem.key == "statsd.server"


# --- masking and rendering --------------------------------------------------------------------

SECRETS = """\
:redis:
  password: 'redis-secret'
:auth:
  provider: 'ldap'
  :ldap:
    host: 'ldap'
    base: 'dc=example'
    user_object: 'uid'
    :service_account_hash:
      :user_dn: 'cn=svc'
      :password: 'ldap-secret'
:providers:
  :dummy:
    api_key: 'k'
    admin_password: 'p'
    token: null
:pools: []
"""


def test_masked_hides_every_secret(tmp_path: Path) -> None:
    config = load(tmp_path, SECRETS)
    masked = config.masked()
    assert masked["redis"]["password"] == "********"
    assert masked["auth"]["ldap"]["service_account_hash"]["password"] == "********"
    assert masked["auth"]["ldap"]["service_account_hash"]["user_dn"] == "cn=svc"
    assert masked["providers"]["dummy"]["api_key"] == "********"
    assert masked["providers"]["dummy"]["admin_password"] == "********"
    assert masked["providers"]["dummy"]["token"] is None
    assert config.raw["redis"]["password"] == "redis-secret"


def test_render_config_masks_uses_symbols_and_loads_back(tmp_path: Path) -> None:
    pools = ":pools:\n  - name: 'a'\n    size: 1\n    alias: 'x'\n    folder: 'f'\n"
    config = load(tmp_path, SECRETS.replace(":pools: []\n", pools))
    text = render_config(config)
    assert "secret" not in text
    assert "\n:config:\n" in text and "\n:pools:\n" in text and "  :dummy:\n" in text
    assert "    service_account_hash:\n      :user_dn: cn=svc\n" in text
    assert text.index(":config:") < text.index(":redis:") < text.index(":pools:")
    reloaded = load_config(write(tmp_path, text, "rendered.yaml"), environ={}, cwd=tmp_path)
    def without_raw(pools: tuple[PoolConfig, ...]) -> list[PoolConfig]:
        return [dataclasses.replace(pool, raw={}) for pool in pools]

    assert without_raw(reloaded.pools) == without_raw(config.pools)
    assert reloaded.pool("a").raw["folder"] == "f"
    assert reloaded.settings == dataclasses.replace(config.settings, raw=reloaded.settings.raw)


# --- bundled files ----------------------------------------------------------------------------


def test_bundled_default_config(repo_root: Path) -> None:
    config = load_config(repo_root / "conf" / "vmpooler.yaml", environ={}, cwd=repo_root)
    assert [pool.size for pool in config.pools] == [2, 2, 1]
    assert all(pool.alias for pool in config.pools)
    assert all(pool.provider == "dummy" for pool in config.pools)
    assert {pool.domain for pool in config.pools} == {"vmpooler.test"}
    assert config.dns_configs["local"].dns_class == "dynamic-dns"
    assert config.redis.embedded
    assert config.notes == ()


def test_example_config_loads_and_documents_every_setting(repo_root: Path) -> None:
    path = repo_root / "conf" / "vmpooler.example.yaml"
    config = load_config(path, environ={}, cwd=repo_root)
    assert config.pools and config.notes == ()
    text = path.read_text()
    for settings in (config.settings, config.redis):
        for item in dataclasses.fields(settings):
            if item.name != "raw":
                assert f" {item.name}:" in text, item.name
    for key in ("extra_config", "purge_enabled", "health_thresholds", ":datadog:", ":statsd:",
                ":graphite:", ":auth:", ":tagfilter:", ":rate_limits:", "createvm_max_time"):
        assert key in text, key
    assert yaml.safe_load(text)[":config"]["provider_call_timeout"] == 600


# --- odds and ends ----------------------------------------------------------------------------


def test_unknown_dns_class_and_bad_tagfilter(tmp_path: Path) -> None:
    text = """\
        :dns_configs:
          :gcp:
            dns_class: 'gcp-clouddns'
            domain: 'example.com'
        :tagfilter:
          url: 5
        """
    found = {p.key: p for p in problems(tmp_path, text, known_dns_classes={"dynamic-dns"})}
    assert set(found) == {"dns_configs.gcp.dns_class", "tagfilter.url"}
    assert found["dns_configs.gcp.dns_class"].line == 3
    assert found["tagfilter.url"].line == 6


def test_legacy_vsphere_section_becomes_a_provider(tmp_path: Path) -> None:
    text = (":vsphere:\n  server: 'vc'\n  username: 'u'\n  password: 'pw'\n  datacenter: 'DC0'\n"
            ":pools:\n  - name: 'a'\n    size: 1\n    provider: 'vsphere'\n"
            "    template: 'Templates/t'\n    folder: 'vmpooler/a'\n    datastore: 'ds'\n"
            "    clone_target: 'cluster'\n")
    config = load(tmp_path, text, known_provider_classes={"dummy", "vsphere"})
    assert config.providers["vsphere"].provider_class == "vsphere"
    assert config.providers["vsphere"].settings["server"] == "vc"
    assert config.masked()["providers"]["vsphere"]["password"] == "********"
    problem = only(problems(tmp_path, text, known_provider_classes={"dummy"}))
    assert problem.key == "providers.vsphere"


def test_symbol_and_plain_spelling_of_one_key_is_noted(tmp_path: Path) -> None:
    config = load(tmp_path, ":config:\n  task_limit: 2\nconfig:\n  task_limit: 3\n")
    assert config.settings.task_limit == 2
    assert any("written both as symbol and plain key" in note for note in config.notes)


def test_missing_config_file_variable_target(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(environ={"VMPOOLER_CONFIG_FILE": "gone.yaml"}, cwd=tmp_path)
    assert only(caught.value.problems).source == str(tmp_path / "gone.yaml")


def test_config_error_text_and_pickling() -> None:
    error = ConfigError([
        ConfigProblem("a.yaml", 3, "pools[0].size", "bad"),
        ConfigProblem("TASK_LIMIT", None, "config.task_limit", "worse"),
    ])
    assert str(error) == "a.yaml:3: pools[0].size: bad\nTASK_LIMIT: config.task_limit: worse"
    assert pickle.loads(pickle.dumps(error)).problems == error.problems
