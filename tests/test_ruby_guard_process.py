"""``vmpooler manager`` started beside vmpooler 3.9.1's running manager (Ruby, its dummy
provider) on one Redis refuses to run: exit status 1 and one line on stderr saying why."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.differential.processes import redis_server, require_ruby, ruby_manager
from tests.harness import wait_until
from vmpooler.actors.storage import schema
from vmpooler.actors.storage.check_stamps import read_ready_stamps

pytestmark = pytest.mark.integration


def _config(path: Path, redis_port: int) -> Path:
    """One file for both managers (ours reads vmpooler's configuration)."""
    document = {
        ":providers": {":dummy": {"filename": str(path.parent / "dummy.yaml")}},
        ":dns_configs": {":loopback": {"dns_class": "dynamic-dns",
                                        "domain": "vmpooler.localhost"}},
        ":redis": {"server": "127.0.0.1", "port": redis_port},
        ":config": {"logfile": str(path.parent / "manager.log"), "task_limit": 4},
        ":pools": [{"name": "ruby-pool", "template": "Templates/tmpl0", "size": 2,
                    "provider": "dummy", "dns_plugin": "loopback",
                    "check_loop_delay_min": 1, "check_loop_delay_max": 2}],
    }
    path.write_text(yaml.safe_dump(document))
    return path


def test_our_manager_refuses_to_start_beside_a_running_ruby_manager(tmp_path: Path) -> None:
    install = require_ruby()
    with redis_server(tmp_path / "redis") as server:
        config = _config(tmp_path / "vmpooler.yaml", server.port)
        client = server.client
        started = time.monotonic()
        with ruby_manager(install, config) as ruby:
            def checked() -> list[str]:
                assert ruby.poll() is None, (tmp_path / "ruby-manager.out").read_text()[-3000:]
                return [s.vm for s in read_ready_stamps(client, ["ruby-pool"]) if s.check]

            stamped = wait_until(checked, 90, "vmpooler's manager to check a ready VM")
            assert not any(s.ours for s in read_ready_stamps(client, ["ruby-pool"]))
            ruby_ready = time.monotonic() - started
            done = subprocess.run(
                [sys.executable, "-m", "vmpooler.web.cli", "manager", "--config", str(config)],
                cwd=tmp_path, capture_output=True, text=True, timeout=60)
            refused = time.monotonic() - started - ruby_ready
            assert done.returncode == 1, done.stdout[-3000:] + done.stderr
            lines = done.stderr.strip().splitlines()
            assert len(lines) == 1, done.stderr
            line = lines[0]
            assert line.startswith("vmpooler: refusing to start: a Ruby vmpooler manager "
                                   "appears to be running on this Redis")
            assert "of pool 'ruby-pool'" in line and "will not run beside it" in line
            # the VM it names was checked by Ruby's manager: before our start or meanwhile
            stamped += checked()
            assert any(f"'{vm}'" in line for vm in stamped), line
            assert "Traceback" not in done.stdout + done.stderr
            # Ours wrote nothing: no heartbeat, no slot owner (it never folded the counters).
            assert not client.exists(schema.manager_heartbeat())
            assert not client.exists(schema.tasks_slot_owners())
            assert ruby.poll() is None
    print(f"vmpooler's manager had a checked ready VM after {ruby_ready:.1f}s; "
          f"ours refused in {refused:.1f}s")
