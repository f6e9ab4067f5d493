"""What one VM's life costs the dummy provider with ``filename``, by inventory size.

In process, no simulated delays: ``--sizes`` VMs are created first, then ``--lives`` VMs each
go through create, ``vm_ready``, ``get_vm``, ``vms_in_pool`` and ``destroy_vm``; prints the
mean milliseconds of one life at each size, and with ``--profile`` the top functions (by
own time) of the lives at the largest size. Runs the ``vmpooler`` on ``PYTHONPATH`` first
(an older build's folders, as ``bench/dummy_inventory.py --before`` lays them out) or this
checkout's. A few seconds for this build; about a minute for the one-YAML-file build.

    .venv/bin/python bench/dummy_calls.py [--sizes 10,100,1000] [--lives 50] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import tempfile
import time
from pathlib import Path

from vmpooler.providers import dummy
from vmpooler.providers.base import ProviderContext

POOLS = {"p": {"name": "p", "template": "templates/p"}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10,100,1000")
    parser.add_argument("--lives", type=int, default=50)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    print(f"code: {dummy.__file__}")
    sizes = [int(s) for s in args.sizes.split(",")]
    for size in sizes:
        with tempfile.TemporaryDirectory() as work:
            context = ProviderContext("dummy", {"filename": str(Path(work) / "inv.yaml")},
                                      POOLS, {}, {})
            provider = dummy.DummyProvider(context, rng=random.Random(1),
                                           sleep=lambda _s: None)
            for n in range(size):
                provider.create_vm("p", f"base{n}")

            def lives(count: int, provider: dummy.DummyProvider = provider) -> None:
                for n in range(count):
                    provider.create_vm("p", f"x{n}")
                    provider.vm_ready("p", f"x{n}")
                    provider.get_vm("p", f"x{n}")
                    provider.vms_in_pool("p")
                    provider.destroy_vm("p", f"x{n}")

            started = time.perf_counter()
            lives(args.lives)
            mean = (time.perf_counter() - started) / args.lives
            print(f"{size:>6} VMs: one VM's life {mean * 1000:.2f} ms")
            if args.profile and size == sizes[-1]:
                profile = cProfile.Profile()
                profile.runcall(lives, max(1, args.lives // 5))
                pstats.Stats(profile).sort_stats("tottime").print_stats(8)


if __name__ == "__main__":
    main()
