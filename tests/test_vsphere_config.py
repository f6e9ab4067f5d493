"""The vSphere provider's configuration: the loader's checks (file, line and key), the
environment's credentials, the host placement rule, and pyvmomi staying out of the API."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.test_config import line_of, load, problems
from vmpooler.providers.vsphere.placement import HostLoad, choose_target, host_load
from vmpooler.providers.vsphere.settings import VsphereSettings, check_settings

GOOD = """\
:providers:
  :vsphere:
    server: 'vc.example.test'
    username: 'svc'
    password: 'pw'
    datacenter: 'DC0'
:config:
  clone_target: 'cluster1'
:pools:
  - name: 'p1'
    size: 1
    provider: 'vsphere'
    template: 'Templates/t1'
    folder: 'vmpooler/p1'
    datastore: 'ds1'
"""


def test_a_complete_section_loads(tmp_path: Path) -> None:
    config = load(tmp_path, GOOD)
    assert config.providers["vsphere"].provider_class == "vsphere"
    assert config.masked()["providers"]["vsphere"]["password"] == "********"


def test_problems_name_file_line_and_key(tmp_path: Path) -> None:
    text = GOOD.replace("    datastore: 'ds1'\n", "    create_linked_clone: 'yes'\n")
    text = text.replace("    username: 'svc'\n", "    username: 'svc'\n    port: 99999\n")
    found = {p.key: p for p in problems(tmp_path, text)}
    assert set(found) == {"pools[0].datastore", "pools[0].create_linked_clone",
                          "providers.vsphere.port"}
    assert "required" in found["pools[0].datastore"].message
    assert found["providers.vsphere.port"].line == line_of(text, "port: 99999")
    assert found["pools[0].create_linked_clone"].line == line_of(text, "create_linked_clone")
    assert found["providers.vsphere.port"].source == str(tmp_path / "vmpooler.yaml")


def test_missing_credentials_say_how_to_give_them(tmp_path: Path) -> None:
    text = GOOD.replace("    password: 'pw'\n", "")
    (problem,) = problems(tmp_path, text)
    assert problem.key == "providers.vsphere.password"
    assert "VMPOOLER_PROVIDER_<NAME>_PASSWORD" in problem.message


def test_credentials_from_the_environment(tmp_path: Path) -> None:
    text = GOOD.replace("    password: 'pw'\n", "").replace("    username: 'svc'\n", "")
    env = {"VMPOOLER_PROVIDER_VSPHERE_USERNAME": "env-user",
           "VMPOOLER_PROVIDER_VSPHERE_PASSWORD": "env-pw"}
    config = load(tmp_path, text, env)
    settings = config.providers["vsphere"].settings
    assert (settings["username"], settings["password"]) == ("env-user", "env-pw")
    assert config.masked()["providers"]["vsphere"]["password"] == "********"


def test_clone_target_is_required_somewhere(tmp_path: Path) -> None:
    text = GOOD.replace("  clone_target: 'cluster1'\n", "  task_limit: 2\n")
    keys = {p.key for p in problems(tmp_path, text)}
    assert keys == {"pools[0].clone_target"}


def test_no_datacenter_loads_with_a_note(tmp_path: Path) -> None:
    """vmpooler's provider then takes vCenter's first datacenter (``find_datacenter(nil)``);
    the configuration cannot know which, so it says the first will be used."""
    config = load(tmp_path, GOOD.replace("    datacenter: 'DC0'\n", ""))
    (note,) = [n for n in config.notes if "datacenter" in n]
    assert note.startswith("pool p1: datacenter ")
    assert "first datacenter" in note


def test_no_datacenter_leaves_the_placement_to_the_provider() -> None:
    settings = {"server": "vc", "username": "u", "password": "pw"}
    pools = {"p1": {"template": "t", "folder": "f", "datastore": "ds", "clone_target": "c"},
             "p2": {"template": "t", "folder": "f", "datastore": "ds", "clone_target": "c",
                    "datacenter": "DC1"}}
    found = check_settings(settings, pools, {})
    assert [(p.pool, p.key, p.note) for p in found] == [("p1", "datacenter", True)]
    parsed = VsphereSettings.from_context("vsphere", settings, pools, {}, {})
    assert parsed.pools["p1"].datacenter is None
    assert parsed.pools["p1"].with_datacenter("DC0").folder_path == "DC0/vm/f"
    assert parsed.pools["p2"].with_datacenter("DC0").datacenter == "DC1"
    assert parsed.pools["p1"].with_datacenter("DC0").resolved_datacenter == "DC0"
    with pytest.raises(ValueError, match="pool p1: the datacenter is not resolved"):
        _ = parsed.pools["p1"].resolved_datacenter  # an inventory path must name one


def test_bad_ready_check(tmp_path: Path) -> None:
    text = GOOD + "    vm_ready_check: 'ping'\n"
    (problem,) = problems(tmp_path, text)
    assert problem.key == "pools[0].vm_ready_check"
    assert "ssh, ssh_ip, guest_tools" in problem.message


def test_settings_defaults_follow_the_gem() -> None:
    pools = {"a": {"template": "t/a", "folder": "f/a", "datastore": "d", "clone_target": "c"},
             "b": {"template": "t/b", "folder": "f/b", "datastore": "d", "clone_target": "c",
                   "create_linked_clone": False, "vm_ready_check": "ssh_ip"}}
    settings = VsphereSettings.from_context(
        "vsphere", {"server": "vc", "username": "u", "password": "Zq9-secret",
                    "datacenter": "DC"},
        pools, {"task_limit": 6, "create_linked_clones": True}, {"a": "x.test", "b": None})
    assert settings.port == 443 and settings.insecure is False
    assert settings.session_pool_size == 6  # max(pools, task_limit, 2)
    assert settings.session_wait == 60 and settings.socket_timeout == 60
    assert settings.pools["a"].linked_clone and not settings.pools["b"].linked_clone
    assert settings.pools["a"].ready_check == "ssh"
    assert settings.pools["b"].ready_check == "ssh_ip"
    assert settings.pools["a"].folder_path == "DC/vm/f/a"
    assert "Zq9-secret" not in repr(settings) and "password" not in repr(settings)
    assert check_settings({"server": "vc", "username": "u", "password": "p"}, {}, {}) == []


def test_vm_events_settings_are_checked() -> None:
    base = {"server": "vc", "username": "u", "password": "p"}
    assert check_settings({**base, "log_vm_events_on_failure": True, "max_vm_events": 50},
                          {}, {}) == []
    found = {(p.key, p.message) for p in check_settings(
        {**base, "log_vm_events_on_failure": "yes", "max_vm_events": 5000}, {}, {})}
    assert found == {("log_vm_events_on_failure", "expected true or false, got 'yes'"),
                     ("max_vm_events", "must be at most 1000, got 5000")}
    assert check_settings({**base, "max_vm_events": 0}, {}, {})[0].key == "max_vm_events"


def test_placement_keeps_a_vm_on_a_least_used_host_and_moves_it_otherwise() -> None:
    hosts = [HostLoad("h1", 10.0, 40.0, "E5"), HostLoad("h2", 50.0, 40.0, "E5"),
             HostLoad("h3", 20.0, 40.0, "E5"), HostLoad("h4", 5.0, 40.0, "Gold")]
    assert choose_target(hosts, "h1", 90) is None  # 10 <= average 26.7 of its model
    assert choose_target(hosts, "h2", 90) == "h1"  # least used of the same CPU model
    overloaded = [HostLoad("h1", 95.0, 40.0, "E5"), HostLoad("h2", 60.0, 40.0, "E5")]
    assert choose_target(overloaded, "h2", 90) is None  # h1 is over the limit: h2 is it
    maintenance = [HostLoad("h1", 1.0, 1.0, "E5", maintenance=True),
                   HostLoad("h2", 9.0, 9.0, "E5")]
    assert choose_target(maintenance, "h1", 90) == "h2"
    assert choose_target([HostLoad("h1", 1.0, 1.0, "E5", healthy=False)], "h1", 90) is None


def test_host_load_from_properties() -> None:
    class Pkg:
        description = "Intel(R) Xeon(R) CPU E5-2680 v4 @ 2.40GHz"

    load_ = host_load({
        "name": "h", "runtime.inMaintenanceMode": False, "overallStatus": "green",
        "configIssue": [], "summary.quickStats.overallCpuUsage": 1000,
        "summary.quickStats.overallMemoryUsage": 2048, "summary.hardware.cpuMhz": 2500,
        "summary.hardware.numCpuCores": 4, "summary.hardware.memorySize": 8 * 1024 ** 3,
        "hardware.cpuPkg": [Pkg()]})
    assert load_ == HostLoad("h", 10.0, 25.0, "v4")  # the gem's fifth word: the generation
    assert host_load({"name": "h", "overallStatus": "yellow"}).eligible(90, None) is False


def test_the_api_and_the_config_never_import_pyvmomi(tmp_path: Path) -> None:
    config = tmp_path / "vmpooler.yaml"
    config.write_text(GOOD)
    script = textwrap.dedent(f"""
        import sys
        from vmpooler.actors.config import load_config
        from vmpooler.web.app import create_app
        import vmpooler.actors.system, vmpooler.web.cli.serve, vmpooler.web.cli
        load_config({str(config)!r}, environ={{}})
        assert not [m for m in sys.modules if m.lower().startswith(("pyvmomi", "pyvim"))], \\
            sorted(m for m in sys.modules if "vmomi" in m.lower())
        from vmpooler.providers.registry import load_provider_class
        load_provider_class("vsphere")
        assert "pyVmomi" in sys.modules
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("key", ["connection_pool_size", "connection_pool_timeout"])
def test_pool_sizes_must_be_positive(tmp_path: Path, key: str) -> None:
    text = GOOD.replace("    datacenter: 'DC0'\n", f"    datacenter: 'DC0'\n    {key}: 0\n")
    (problem,) = problems(tmp_path, text)
    assert problem.key == f"providers.vsphere.{key}"
