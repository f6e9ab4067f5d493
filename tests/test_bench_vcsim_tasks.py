"""``bench/vcsim_tasks.py`` and the fill summary of ``bench/vsphere.py``: the tasks read from
a SOAP trace as vcsim writes it, the fill's physical bound, and a fill that timed out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.vcsim import require_vcsim

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.append(str(BENCH))  # the bench modules import each other by name

import vsphere  # noqa: E402
from vcsim_tasks import (  # noqa: E402
    PROFILES,
    clone_figures,
    fcfs_makespan,
    fill_bound,
    parse_tasks,
)

REALISTIC = PROFILES["realistic"]


def info(key: str, state: str, queued: str, started: str | None = None,
         completed: str | None = None, description: str = "VirtualMachine.cloneVm") -> str:
    """One TaskInfo as vcsim serialises it (a Fetch / RetrieveProperties answer)."""
    times = f"<queueTime>2026-12-05T21:53:{queued}Z</queueTime>"
    if started:
        times += f"<startTime>2026-12-05T21:53:{started}Z</startTime>"
    if completed:
        times += f"<completeTime>2026-12-05T21:53:{completed}Z</completeTime>"
    return (f'<returnval XMLSchema-instance:type="TaskInfo"><key>{key}</key>'
            f'<task type="Task">{key}</task><name>CloneVM_Task</name>'
            f"<descriptionId>{description}</descriptionId>"
            f'<entity type="VirtualMachine">vm-71</entity><entityName>tmpl0</entityName>'
            f"<state>{state}</state><cancelled>false</cancelled><cancelable>false</cancelable>"
            f'<reason XMLSchema-instance:type="TaskReasonUser"><userName>vcsim</userName>'
            f"</reason>{times}<eventChainId>0</eventChainId></returnval>\n")


def trace(*infos: str) -> bytes:
    return "".join(f"Request: <soapenv:Body><Fetch/></soapenv:Body>\nResponse: {i}"
                   for i in infos).encode()


def test_the_last_look_at_the_furthest_state_gives_a_queued_clones_real_start() -> None:
    data = trace(
        info("task-79", "queued", "30.674405331"),
        info("task-79", "running", "30.674405331", "41.632697565"),
        info("task-79", "success", "30.674405331", "41.632697565", "59.374219413"),
        info("task-79", "running", "30.674405331", "41.632697565"),  # a stale look after
        info("task-80", "running", "31.000000000", "31.000050000"),
    )
    tasks = parse_tasks(data)
    assert sorted(tasks) == ["task-79", "task-80"]
    done = tasks["task-79"]
    assert done.state == "success"
    assert done.queue_wait == pytest.approx(10.958292, abs=1e-5)
    assert done.run_seconds == pytest.approx(17.741522, abs=1e-5)
    assert tasks["task-80"].run_seconds is None


def test_clone_figures_count_the_queue_and_the_peaks() -> None:
    # Three clones on two slots: the third waits for the first, the fourth is still queued.
    data = trace(
        info("task-1", "success", "00.000000", "00.000100", "20.000100"),
        info("task-2", "success", "00.001000", "00.001100", "25.001100"),
        info("task-3", "success", "00.002000", "20.000200", "38.000200"),
        info("task-4", "queued", "00.003000"),
        info("task-5", "success", "00.004000", "00.004000", "01.000000",
             description="VirtualMachine.powerOn"),
    )
    figures = clone_figures(parse_tasks(data), vms=3, slots=2)
    assert figures["clone_tasks_seen"] == 4
    assert figures["clone_tasks_ended"] == 3
    assert figures["clones_queued"] == 2  # task-3 waited 20 s, task-4 is still waiting
    assert figures["queue_wait_max_s"] == 20.0
    assert figures["clone_run_mean_s"] == 21.0  # (20 + 25 + 18) / 3
    assert figures["peak_clones_in_flight"] == 4
    assert figures["peak_clones_running"] == 2
    assert figures["clone_span_s"] == 38.0
    assert figures["schedule_bound_s"] == 38.0  # 20 + 18 on the first slot


def test_no_schedule_bound_until_every_needed_clone_ended() -> None:
    data = trace(info("task-1", "success", "00.000000", "00.000100", "20.000100"),
                 info("task-2", "running", "00.001000", "00.001100"))
    figures = clone_figures(parse_tasks(data), vms=2, slots=8)
    assert figures["schedule_bound_s"] is None
    assert figures["peak_clones_running"] == 2  # the running one counts to the end


def test_fcfs_makespan_fills_the_slot_that_frees_first() -> None:
    assert fcfs_makespan([20, 25, 18, 5], 2) == 38  # 20+18 | 25+5
    assert fcfs_makespan([10] * 9, 8) == 20
    assert fcfs_makespan([], 8) == 0


def test_the_bound_waves_on_the_smaller_limit_and_a_separate_power_on() -> None:
    bound = fill_bound(REALISTIC, vms=50, task_limit=10, power_on_per_vm=0.0)
    assert bound == {"slots": 8, "waves": 7, "clone_mean_s": 20.0, "after_clone_s": 0.0,
                     "seconds": 140.0}
    assert fill_bound(REALISTIC, vms=200, task_limit=5, power_on_per_vm=0.0)["seconds"] == 800
    with_power_on = fill_bound(REALISTIC, vms=50, task_limit=10, power_on_per_vm=1.0)
    assert with_power_on["seconds"] == 142.0
    assert fill_bound(PROFILES["ideal"], vms=50, task_limit=10, power_on_per_vm=0.0) is None


def test_profile_flags() -> None:
    assert PROFILES["ideal"].flags(1) == []
    assert REALISTIC.flags(7) == [
        "-task-delay", "CloneVM_Task:20000,PowerOnVM_Task:2000,PowerOffVM_Task:2000,"
        "Destroy_Task:2000", "-task-jitter", "0.3", "-fault-seed", "7",
        "-max-concurrent-tasks", "8"]
    assert REALISTIC.fill_timeout == 1200


def test_a_fill_that_timed_out_is_reported_with_what_it_reached() -> None:
    timed_out = {"manager": "ruby", "scenario": "20x10", "repeat": 0, "workdir": "/x",
                 "fill": {"filled": False, "seconds": None, "ready": 187, "target": 200,
                          "gave_up_s": 1200.05, "vms_created": 196, "soap_calls": 9000,
                          "soap_by_method": {"CloneVM_Task": 196},
                          "soap_by_method_per_vm": {"CloneVM_Task": 1.0}}}
    filled = {"manager": "python", "scenario": "20x10", "repeat": 0, "workdir": "/y",
              "fill": {"filled": True, "seconds": 520.0, "ready": 200, "target": 200,
                       "gave_up_s": None, "vms_created": 200, "soap_calls": 3000,
                       "soap_by_method": {"CloneVM_Task": 200},
                       "soap_by_method_per_vm": {"CloneVM_Task": 1.0}}}
    ruby, python = vsphere.summary([timed_out]), vsphere.summary([filled])
    assert (ruby["ok"], ruby["runs"], ruby["not_filled"]) == (0, 1, ["187/200 at 1200.05s"])
    assert ruby["fill"]["vms_created"] == 196  # its figures still shown
    assert python["not_filled"] == [] and python["fill"]["seconds"] == 520.0
    text = vsphere.table([("20x10", "ruby", ruby), ("20x10", "python", python)],
                         task_rows=True)
    row = next(line for line in text.splitlines() if "not filled" in line)
    assert "187/200 at 1200.05s" in row
    assert "FILL AGAINST VCENTER'S OWN LIMITS" in text



@pytest.mark.integration
@pytest.mark.timeout(180)
def test_a_realistic_run_of_our_manager_reads_its_clones_from_the_trace(tmp_path: Path) -> None:
    """``bench/vsphere.py --profile realistic`` as a process, our manager only, 1 x 2: the
    simulator runs the clones asynchronously and the figures come from its real trace."""
    if os.environ.get("VMPOOLER_BENCH_TESTS") != "1":
        pytest.skip("a minute-long benchmark run: set VMPOOLER_BENCH_TESTS=1 to run it")
    binary = require_vcsim()
    if os.geteuid() != 0:
        pytest.skip("bench/vsphere.py needs root (ports 443 and 22)")
    if vsphere.port_in_use(vsphere.VCSIM_PORT):
        pytest.skip("127.0.0.1:443 is in use")
    out = tmp_path / "out.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH / "vsphere.py"), "--profile", "realistic", "--managers",
         "python", "--scenarios", "1x2", "--steady-seconds", "2", "--vcsim", binary,
         "--workdir", str(tmp_path / "runs"), "--json", str(out)],
        capture_output=True, text=True, timeout=170, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert "-max-concurrent-tasks" in doc["settings"]["vcsim_flags"]
    fill = doc["runs"][0]["fill"]
    assert fill["filled"] and fill["bound_s"] == 20.0 and fill["bound_slots"] == 8
    assert (fill["clone_tasks_seen"], fill["clone_tasks_ended"]) == (2, 2)
    assert 14 <= fill["clone_run_mean_s"] <= 26  # 20 s +-30 %
    assert fill["peak_clones_running"] == 2 and fill["clones_queued"] == 0
    assert fill["schedule_bound_s"] <= fill["seconds"]
    assert fill["fill_over_bound"] == pytest.approx(fill["seconds"] / 20, abs=0.01)
    assert 0 <= fill["after_last_clone_s"] < fill["seconds"]
    assert "FILL AGAINST VCENTER'S OWN LIMITS" in proc.stdout
