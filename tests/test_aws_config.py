"""The aws provider's configuration: vmpooler-provider-ec2's own example loads unchanged,
mistakes are named by file, line and key, and a missing boto3 is one line saying how to
install it (never a traceback)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from vmpooler.providers.aws.settings import AwsSettings

EXAMPLE = Path(__file__).parent / "data" / "vmpooler-provider-ec2.example.yaml"


def check_config(path: Path, *, without_boto3: bool = False) -> subprocess.CompletedProcess[str]:
    hide = "sys.modules['boto3'] = None; " if without_boto3 else ""
    code = (f"import sys; {hide}from vmpooler.web.cli import main; "
            f"sys.argv = ['vmpooler', 'check-config', '--config', {str(path)!r}]; "
            "sys.exit(main())")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)


def test_the_gems_example_passes_check_config() -> None:
    done = check_config(EXAMPLE)
    assert done.returncode == 0, done.stderr
    assert "provider_class: aws" in done.stdout
    assert "Traceback" not in done.stderr


def test_mistakes_are_named_by_file_line_and_key(tmp_path: Path) -> None:
    config = tmp_path / "vmpooler.yaml"
    config.write_text(":providers:\n  :aws:\n    region: us-west-2\n"
                      "    vm_ready_check: telnet\n    security_group_ids: sg-1\n"
                      ":pools:\n  - name: p1\n    provider: aws\n    size: 1\n"
                      "    template: ami-1\n")
    done = check_config(config)
    assert done.returncode != 0
    assert f"{config}:4: providers.aws.vm_ready_check: must be one of" in done.stderr
    assert f"{config}:5: providers.aws.security_group_ids: expected a list" in done.stderr
    assert f"{config}:7: pools[0].amisize: is required" in done.stderr
    assert "Traceback" not in done.stderr


def test_without_boto3_one_line_says_how_to_install_it() -> None:
    done = check_config(EXAMPLE, without_boto3=True)
    assert done.returncode != 0
    assert "provider_class: the aws provider needs boto3: pip install 'vmpooler[aws]'" in (
        done.stderr)
    assert "Traceback" not in done.stderr


def test_pool_keys_win_over_the_providers_and_credentials_come_from_the_environment(
        ) -> None:
    settings = AwsSettings.from_context(
        "aws", {"region": "us-west-2", "zone": "us-west-2b", "amisize": "a1.small",
                "volume_size": "10", "ABS_AWS_ACCESS_KEY": "from-file",
                "instance_tags": {"team": "ci"}},
        {"alma": {"template": "ami-1", "zone": "us-west-2a", "amisize": "a1.large",
                  "volume_size": "20", "instance_tags": {"owner": "qa"}}},
        {}, {"alma": "example.com"}, environ={"ABS_AWS_ACCESS_KEY": "from-env"})
    spec = settings.pools["alma"]
    assert (spec.zone, spec.amisize, spec.volume_size) == ("us-west-2a", "a1.large", 20)
    assert dict(spec.instance_tags) == {"team": "ci", "owner": "qa"}
    assert spec.domain == "example.com"
    assert settings.access_key == "from-env" and settings.secret_key is None


def test_the_clients_retry_adaptively_and_launches_are_never_retried_blind() -> None:
    from vmpooler.providers.aws import AwsProvider
    from vmpooler.providers.base import ProviderContext

    provider = AwsProvider(ProviderContext(
        "aws", {"region": "us-west-2", "endpoint_url": "http://127.0.0.1:9"},
        {"p": {"template": "ami-1", "amisize": "t3.micro"}}, {}, {}))
    try:
        retries = provider.ec2.client.meta.config.retries
        assert retries["mode"] == "adaptive" and retries["total_max_attempts"] == 11
        assert provider.ec2._launcher.meta.config.retries["total_max_attempts"] == 1
    finally:
        provider.close()


def test_the_api_and_the_config_never_import_boto3() -> None:
    script = textwrap.dedent(f"""
        import sys
        from vmpooler.actors.config import load_config
        from vmpooler.web.app import create_app
        import vmpooler.actors.system, vmpooler.web.cli
        load_config({str(EXAMPLE)!r}, environ={{}})
        def sdk():
            return sorted(m for m in sys.modules if m.startswith(("boto3", "botocore")))
        assert not sdk(), sdk()
        from vmpooler.providers.registry import load_provider_class
        from vmpooler.providers.base import ProviderContext
        provider_class = load_provider_class("aws")
        assert not sdk(), sdk()
        provider_class(ProviderContext("aws", {{"region": "us-west-2"}}, {{}}, {{}}, {{}}))
        assert "boto3" in sys.modules
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
