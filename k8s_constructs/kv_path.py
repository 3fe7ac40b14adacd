"""Which path the KV cache takes between the engines, as libfabric and NIXL say it in the GPU workers' logs.

With KV_TRANSPORT=libfabric the workers get FI_LOG_LEVEL=warn and NIXL_LOG_LEVEL=INFO (KV_PATH_LOG_ENV): without them
libfabric logs nothing at all (an unset FI_LOG_LEVEL is not "warn": `src/log.c`, `fi_log_init`) and NIXL only
warnings, so no line would say whether the KV cache moves from GPU memory or through host bounce buffers. `make
verify` reads the lines below after its completion (tools/verify.py).

Each line is the text of a format string at the versions the image ships, read in their source, not yet recorded on
an EFA node:
- libfabric (the image's EFA installer; upstream v2.4.0, v2.6.0 and main read, the same text in each):
  `prov/efa/src/efa_hmem.c`, `efa_hmem_info_check_p2p_support_cuda` (v2.6.0 line 179) warns once per process when
  the EFA device cannot register CUDA memory: no GPUDirect RDMA (g6, g6e). The efa (RDM) fabric then still takes the
  KV cache's GPU memory and copies it through host memory (`rdm/efa_rdm_mr.c`, `efa_rdm_rma_post_read`); success
  prints nothing.
- NIXL 1.3.1's libfabric plugin (the image's wheel, git 7cf3019f; `src/utils/libfabric/`): `libfabric_rail.cpp`
  lines 457/461 (a rail with or without FI_HMEM), 470 (the fabric), 1358 (GPU memory registered as host memory),
  `libfabric_topology.cpp` 136 (no EFA device: TCP), and the failures of a transfer (`libfabric_rail.cpp` 738, 1277;
  `libfabric_backend.cpp` 1163, 1435). An EAGAIN retry is logged only at DEBUG (`libfabric_rail.cpp` 1250), and NIXL
  retries it forever, with RNR retry infinite: a stalled transfer is otherwise silent.
- vLLM 0.26.0 (`kv_connector/v1/nixl/base_worker.py` line 832): the decode worker's failed transfer.
"""

from __future__ import annotations

from typing import Final

KV_PATH_LOG_ENV: Final = (("FI_LOG_LEVEL", "warn"), ("NIXL_LOG_LEVEL", "INFO"))

NO_GPUDIRECT: Final = "Failed to register CUDA buffer with the EFA device"  # libfabric, warn
HMEM_RAIL: Final = "Using provider with FI_HMEM support for rail"  # NIXL, INFO
NO_HMEM_RAIL: Final = "Using provider without FI_HMEM support for rail"  # NIXL, INFO
VRAM_AS_HOST: Final = "VRAM memory requested but provider does not support FI_HMEM"  # NIXL, WARN
TCP_FALLBACK: Final = "devices (TCP fallback)"  # NIXL, INFO: "Discovered N tcp devices (TCP fallback)"
TRANSFER_FAILURES: Final = (
    "fi_read failed on rail",  # NIXL, ERROR
    "CQ read failed on rail",  # NIXL, ERROR (with libfabric's prov_errno)
    "PT: Failed to process completions on rails",  # NIXL's progress thread, ERROR
    "Failed to progress rails in checkXfer",  # NIXL, ERROR
    "fi_read still retrying EAGAIN on rail",  # NIXL, DEBUG only: with NIXL_LOG_LEVEL=DEBUG for a bug report
    "becomes unresponsive",  # libfabric, warn: "The peer of address %s becomes unresponsive" (v2.6.0 on)
    "NIXL transfer failure:",  # vLLM, ERROR
)
KV_PATH_MARKERS: Final = (NO_GPUDIRECT, HMEM_RAIL, NO_HMEM_RAIL, VRAM_AS_HOST, TCP_FALLBACK, *TRANSFER_FAILURES)

BOUNCE_BUFFERS: Final = "bounce buffers (no GPUDirect RDMA: libfabric copies the KV cache through host memory)"
DEVICE_MEMORY: Final = "GPU memory (libfabric registered it with the EFA device: GPUDirect RDMA)"
UNKNOWN: Final = "unknown (no libfabric or NIXL start-up line: were FI_LOG_LEVEL and NIXL_LOG_LEVEL set?)"
# Paths on which the KV cache cannot arrive right or at EFA's speed: `make verify` fails on them.
WRONG_PATHS: Final = {
    TCP_FALLBACK: "TCP (NIXL found no EFA device: the pod has no EFA request, or the device plugin is missing)",
    VRAM_AS_HOST: "GPU memory registered as host memory (NIXL's rail has no FI_HMEM)",
    NO_HMEM_RAIL: "GPU memory registered as host memory (NIXL's rail has no FI_HMEM)",
}


def kv_path(log_lines: str) -> tuple[str, list[str]]:
    """The path one worker's logs say its KV cache takes, and the transfer failures they show (their first lines)."""
    lines = log_lines.splitlines()
    failures = [line.strip()[:200] for line in lines if any(marker in line for marker in TRANSFER_FAILURES)]
    for marker, path in WRONG_PATHS.items():
        if any(marker in line for line in lines):
            return path, failures[:3]
    if any(NO_GPUDIRECT in line for line in lines):
        return BOUNCE_BUFFERS, failures[:3]
    if any(HMEM_RAIL in line for line in lines):
        # With FI_LOG_LEVEL=warn set, libfabric's silence on the CUDA probe is its success.
        return DEVICE_MEMORY, failures[:3]
    return UNKNOWN, failures[:3]


def wrong_path(path: str) -> bool:
    return path in WRONG_PATHS.values()
