"""The client key the limiters count a client under (web/clientaddr.py): IPv4 as is, IPv6 by
its ``ipv6_prefix_length`` network, IPv4-mapped IPv6 as IPv4; and the setting itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import falcon
import falcon.testing
import pytest

from tests.test_config import load, only, problems
from vmpooler.actors.config import GlobalSettings
from vmpooler.web.clientaddr import TrustedProxies, client_key


@pytest.mark.parametrize(("address", "prefix", "key"), [
    ("198.51.100.7", 64, "198.51.100.7"),
    ("198.51.100.7", 1, "198.51.100.7"),  # IPv4 is never grouped
    ("::ffff:198.51.100.7", 64, "198.51.100.7"),
    ("::ffff:c633:6407", 64, "198.51.100.7"),
    ("2001:db8:1:2:aaaa:bbbb:cccc:dddd", 64, "2001:db8:1:2::/64"),
    ("2001:DB8:1:2::1", 64, "2001:db8:1:2::/64"),
    ("2001:db8:1:2::1", 48, "2001:db8:1::/48"),
    ("2001:db8:1:2::1", 56, "2001:db8:1::/56"),
    ("2001:db8:1:2::1", 128, "2001:db8:1:2::1/128"),
    ("fe80::1%eth0", 64, "fe80::/64"),
    ("::1", 64, "::/64"),
    ("unix:/run/sock", 64, "unix:/run/sock"),  # not an address: as given
    ("", 64, ""),
])
def test_client_key(address: str, prefix: int, key: str) -> None:
    assert client_key(address, prefix) == key


def request(remote_addr: str, **headers: str) -> falcon.Request:
    return falcon.Request(falcon.testing.create_environ(remote_addr=remote_addr,
                                                        headers=headers))


def test_trusted_proxies_give_the_key_of_the_forwarded_client() -> None:
    proxies = TrustedProxies(["10.0.0.0/8"], ipv6_prefix_length=56)
    forwarded = request("10.0.0.1", **{"X-Forwarded-For": "2001:db8:1:2::1"})
    assert proxies.client_address(forwarded) == "2001:db8:1:2::1"
    assert proxies.client_key(forwarded) == "2001:db8:1::/56"
    assert TrustedProxies().client_key(forwarded) == "10.0.0.1"  # the untrusted peer's own
    assert TrustedProxies().client_key(request("2001:db8::5")) == "2001:db8::/64"
    assert TrustedProxies.of(GlobalSettings(ipv6_prefix_length=32)).client_key(
        request("2001:db8:77::5")) == "2001:db8::/32"
    with pytest.raises(ValueError, match="129"):
        TrustedProxies(ipv6_prefix_length=129)


# -- the setting -------------------------------------------------------------------------------
def test_ipv6_prefix_length_default_yaml_and_environment(tmp_path: Path) -> None:
    assert GlobalSettings().ipv6_prefix_length == 64
    assert load(tmp_path, ":config:\n  ipv6_prefix_length: 48\n:pools: []\n"
                ).settings.ipv6_prefix_length == 48
    assert load(tmp_path, ":pools: []\n", {"IPV6_PREFIX_LENGTH": "56"}
                ).settings.ipv6_prefix_length == 56


@pytest.mark.parametrize("value", ["0", "129", "-1", "'/64'", "64.5"])
def test_a_bad_ipv6_prefix_length_names_file_line_and_key(tmp_path: Path, value: str) -> None:
    found = only(problems(tmp_path, f":config:\n  ipv6_prefix_length: {value}\n:pools: []\n"))
    assert (found.key, found.line) == ("config.ipv6_prefix_length", 2)
    assert "between 1 and 128" in found.message


def test_check_config_refuses_a_bad_prefix_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "vmpooler.yaml"
    path.write_text(":config:\n  ipv6_prefix_length: 200\n:pools: []\n")
    result = subprocess.run([sys.executable, "-m", "vmpooler.web.cli", "check-config",
                             "--config", str(path)], capture_output=True, text=True,
                            timeout=60, cwd=tmp_path)
    assert result.returncode != 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in (result.stdout + result.stderr).splitlines()
             if "ipv6_prefix_length" in line]
    assert len(lines) == 1 and ":2:" in lines[0] and "between 1 and 128" in lines[0], lines
