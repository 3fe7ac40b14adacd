"""What the tests' local Ray clusters share. The scenario modules import it in processes of their own: nothing
heavy here."""

from __future__ import annotations

from typing import Any

# Just over Ray's smallest object store (ray_constants.OBJECT_STORE_MINIMUM_MEMORY_BYTES, 75 MiB in 2.58): several
# raylets run at once on a 2-core CI machine, and no test puts large objects.
OBJECT_STORE_BYTES = 78 * 1024 * 1024

# A head as the RayCluster's (no CPU or GPU for work), without the daemons no test of a lean cluster reads: the
# dashboard, Ray's autoscaler monitor and its log monitor (the drivers take no worker logs).
QUIET_HEAD: dict[str, Any] = {
    "num_cpus": 0,
    "num_gpus": 0,
    "object_store_memory": OBJECT_STORE_BYTES,
    "include_dashboard": False,
    "no_monitor": True,
    "include_log_monitor": False,
}
