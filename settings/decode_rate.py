"""The longest response: MAX_MODEL_LEN tokens at the slowest decode rate. Whatever a stream passes through waits
that long for it: Serve's drain of a decode or ingress replica (k8s_constructs/serve_config.py) and the load
balancer's idle timeout and deregistration delay (settings/endpoint.py)."""

from __future__ import annotations

import math
from typing import Final

# Eager decode on an L4 is memory-bandwidth-bound, each token reading the GPU's weights once (~17 GiB for Qwen3.5-9B
# text-only) at ~300 GB/s, ~60 ms; a GPU filled to the fit check's budget (~20 GiB) plus the KV cache of 16 streams
# reads ~22 GiB per step, ~80 ms. The L4 is the slowest GPU of the EFA types (settings/instance_types.py); the H200
# run measured 40-51 ms eager (docs/scaling.md).
SLOWEST_DECODE_S_PER_TOKEN: Final = 0.08


def longest_response_s(max_model_len: int) -> int:
    """Seconds to decode MAX_MODEL_LEN tokens at the slowest rate."""
    return math.ceil(max_model_len * SLOWEST_DECODE_S_PER_TOKEN)
