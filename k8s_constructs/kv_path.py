"""Which path the KV cache takes between the engines, as libfabric and NIXL say it in the GPU workers' logs.

With KV_TRANSPORT=libfabric the workers get FI_LOG_LEVEL=warn and NIXL_LOG_LEVEL=INFO (KV_PATH_LOG_ENV): without them
libfabric logs nothing at all (an unset FI_LOG_LEVEL is not "warn": `src/log.c`, `fi_log_init`) and NIXL only
warnings, so no line would say whether the KV cache moves from GPU memory or through host bounce buffers. `make
verify` reads the lines below before and after its completion (tools/verify.py).

Each line is the text of a format string read in the sources, not yet recorded on an EFA node; the image's libfabric
version was not checked (`fi_info --version` in the image says it):
- libfabric, upstream v2.4.0, v2.6.0 and main (the same text in each): `prov/efa/src/efa_hmem.c`,
  `efa_hmem_info_check_p2p_support_cuda` (v2.6.0 line 179) warns once per process when the EFA device cannot
  register CUDA memory: no GPUDirect RDMA (g6, g6e). The efa (RDM) fabric then still takes the KV cache's GPU memory
  (`rdm/efa_rdm_mr.c`, `efa_rdm_mr_reg_impl`: a key without `ibv_reg_mr`) and emulates the read through host memory
  (`rdm/efa_rdm_rma.c`, `efa_rdm_rma_post_read`). Success prints nothing, so silence is not proof of GPUDirect.
  `rdm/efa_rdm_cq.c` (v2.6.0 line 639) warns of an unresponsive peer.
- NIXL 1.3.1's libfabric plugin (a nixl-cu13 1.3.1 wheel, git 7cf3019f; `src/utils/libfabric/`): `libfabric_rail.cpp`
  lines 457 and 461 (a rail without, then with, FI_HMEM), 1358 (GPU memory registered as host memory),
  `libfabric_topology.cpp` 136 (no EFA device: TCP), and a transfer's failures (`libfabric_rail.cpp` 738, 1277;
  `libfabric_backend.cpp` 1163, 1435). An EAGAIN retry is logged only at DEBUG (`libfabric_rail.cpp` 1250): NIXL
  retries it forever, RNR retry infinite, so a stalled read is otherwise silent.
- vLLM 0.26.0 (`kv_connector/v1/nixl/base_worker.py` line 832): the decode worker's failed transfer.
"""

from __future__ import annotations

from dataclasses import dataclass
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
    "The peer of address",  # libfabric, warn: "The peer of address %s becomes unresponsive" (v2.6.0 on)
    "NIXL transfer failure:",  # vLLM, ERROR
)
# A retry that may still succeed (NIXL_LOG_LEVEL=DEBUG, for a bug report): counted and said, not failed.
STALL_SIGN: Final = "fi_read still retrying EAGAIN on rail"  # NIXL, DEBUG
KV_PATH_MARKERS: Final = (
    NO_GPUDIRECT, HMEM_RAIL, NO_HMEM_RAIL, VRAM_AS_HOST, TCP_FALLBACK, *TRANSFER_FAILURES, STALL_SIGN
)  # fmt: skip

BOUNCE_BUFFERS: Final = "bounce buffers (no GPUDirect RDMA: libfabric copies the KV cache through host memory)"
HMEM_UNCONFIRMED: Final = (
    "GPU memory by NIXL's FI_HMEM rail; libfabric did not warn of its CUDA probe (GPUDirect RDMA where the type has it)"
)
UNKNOWN: Final = "unknown (no libfabric or NIXL start-up line: were FI_LOG_LEVEL and NIXL_LOG_LEVEL set?)"
UCX: Final = "UCX (KV_TRANSPORT=ucx)"
TCP: Final = "TCP (NIXL found no EFA device: the pod has no EFA request, or the device plugin is missing)"
AS_HOST_MEMORY: Final = "GPU memory registered as host memory (NIXL's rail has no FI_HMEM)"
# Paths on which the KV cache cannot arrive right or at EFA's speed: `make verify` fails on them.
WRONG_PATHS: Final = {TCP_FALLBACK: TCP, VRAM_AS_HOST: AS_HOST_MEMORY, NO_HMEM_RAIL: AS_HOST_MEMORY}


@dataclass(frozen=True)
class KvPath:
    """One worker's KV path as its logs say it, its transfer-failure lines, and its EAGAIN retry lines."""

    path: str
    failures: tuple[str, ...] = ()
    retries: int = 0

    @property
    def wrong(self) -> bool:
        return self.path in WRONG_PATHS.values()


def kv_path(log_lines: str, *, over_efa: bool = True) -> KvPath:
    """The path one worker's logs say its KV cache takes (UCX without EFA), with the failure lines they hold."""
    lines = log_lines.splitlines()
    failures = tuple(line.strip()[:200] for line in lines if any(marker in line for marker in TRANSFER_FAILURES))
    retries = sum(STALL_SIGN in line for line in lines)

    def has(marker: str) -> bool:
        return any(marker in line for line in lines)

    wrong = [path for marker, path in WRONG_PATHS.items() if has(marker)]
    if not over_efa:
        path = UCX
    elif wrong:
        path = wrong[0]
    elif has(NO_GPUDIRECT):
        path = BOUNCE_BUFFERS
    elif has(HMEM_RAIL):
        path = HMEM_UNCONFIRMED
    else:
        path = UNKNOWN
    return KvPath(path, failures, retries)
