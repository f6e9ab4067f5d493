"""``check-config`` warns about every key it accepts but nothing acts on, naming file, line
and key; the reliability keys of reference §4.11 are all acted on when their feature is on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from vmpooler.actors.config import load_config
from vmpooler.actors.config.unacted import unacted_keys

VMPOOLER = [sys.executable, "-m", "vmpooler.web.cli"]

ACTED = """\
---
:config:
  purge_enabled: true
  purge_dry_run: true
  purge_interval: 600
  max_pending_age: 100
  max_ready_age: 100
  max_completed_age: 100
  max_orphaned_age: 100
  health_check_enabled: true
  health_check_interval: 60
  health_thresholds:
    dlq_max_warning: 5
  dlq_enabled: true
  dlq_ttl: 24
  dlq_max_entries: 50
  connection_pool_monitor_enabled: true
  connection_pool_monitor_interval: 5
  purge_unconfigured_resources: true
:redis:
  server: 127.0.0.1
  reconnect_attempts: 3
:providers:
  :dummy:
    provider_class: dummy
    purge_unconfigured_resources: true
    resources_allowlist: [keep]
:pools:
  - name: p
    size: 1
"""

UNACTED = """\
---
:config:
  purge_dry_run: true
  health_thresholds:
    stuck_vm_max_warning: 3
  manage_host_selection: true
:tracing:
  enabled: 'false'
  jaeger_host: http://jaeger:14268/api/traces
:providers:
  :dummy:
    provider_class: dummy
  :spare:
    provider_class: dummy
    resources_allowlist: [x]
:pools:
  - name: p
    size: 1
"""


def test_every_reliability_key_is_acted_on_when_its_feature_is_on(tmp_path: Path) -> None:
    path = tmp_path / "acted.yaml"
    path.write_text(ACTED)
    config = load_config(path, environ={})
    assert unacted_keys(config) == []
    result = subprocess.run([*VMPOOLER, "check-config", "--config", str(path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    assert "warning" not in result.stderr


def test_check_config_names_file_line_and_key_of_unacted_keys(tmp_path: Path) -> None:
    path = tmp_path / "unacted.yaml"
    path.write_text(UNACTED)
    result = subprocess.run([*VMPOOLER, "check-config", "--config", str(path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    warnings = [line for line in result.stderr.splitlines() if "warning:" in line]
    where = {line.split(": ")[3]: line.split(": ")[2] for line in warnings}
    assert where == {
        "tracing.jaeger_host": f"{path}:9",
        "config.manage_host_selection": f"{path}:6",
        "config.purge_dry_run": f"{path}:3",
        "config.health_thresholds": f"{path}:4",
        "providers.spare.resources_allowlist": f"{path}:15",
    }
    assert all(line.endswith("(not acted on)") for line in warnings)
    assert any("has no effect while purge_enabled is false" in line for line in warnings)
    assert result.stdout.startswith("# source:")  # the YAML itself stays on stdout


def test_the_opt_in_to_pool_changes_without_auth_warns_where_it_does_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c.yaml"
    pools = ":pools:\n  - name: p\n    size: 1\n"
    path.write_text(":config:\n  experimental_features_without_auth: true\n" + pools)
    assert [(key, why) for key, why in unacted_keys(load_config(path, environ={}))] == [
        (("config", "experimental_features_without_auth"),
         "has no effect while experimental_features is false")]
    path.write_text(":config:\n  experimental_features: true\n"
                    "  experimental_features_without_auth: true\n"
                    ":auth:\n  provider: dummy\n" + pools)
    assert [why for _, why in unacted_keys(load_config(path, environ={"VMPOOLER_DEBUG": "1"}))] == [
        "has no effect with :auth: (pool changes need a valid token)"]
    path.write_text(":config:\n  experimental_features: true\n"
                    "  experimental_features_without_auth: true\n" + pools)
    assert unacted_keys(load_config(path, environ={})) == []
