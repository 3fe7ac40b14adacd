"""The preflight's look at the GCS store (GCS_FAULT_TOLERANCE=redis): ElastiCache offers GCS_STORE_NODE_TYPE and the
Valkey version the system stack asks for in this Region, so that a typo or a Region without the type fails here,
not 10 minutes into the system stack's update."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from preflight.results import CheckResult, fail, ok, warn

NAME = "gcs-store"


def check_gcs_store(elasticache: Any, *, node_type: str, engine: str, engine_version: str, region: str) -> CheckResult:
    if not node_type:
        return ok(NAME, "GCS_FAULT_TOLERANCE=off: no store")
    try:
        # Reserved-node offerings are listed for every node type the Region offers, whatever the engine.
        offered = elasticache.describe_reserved_cache_nodes_offerings(CacheNodeType=node_type, MaxRecords=20).get(
            "ReservedCacheNodesOfferings", []
        )
        versions = elasticache.describe_cache_engine_versions(Engine=engine, EngineVersion=engine_version).get(
            "CacheEngineVersions", []
        )
    except (BotoCoreError, ClientError) as error:
        return warn(NAME, "not checked", f"ElastiCache did not answer: {error}")
    if not offered:
        return fail(
            NAME,
            f"ElastiCache offers no {node_type} in {region}",
            "set GCS_STORE_NODE_TYPE to a node type of the Region (e.g. cache.t4g.micro, cache.m7g.large)",
        )
    if not versions:
        return fail(
            NAME,
            f"ElastiCache offers no {engine} {engine_version} in {region}",
            "deploy in a Region with Valkey 8.1, or keep GCS_FAULT_TOLERANCE=off",
        )
    return ok(NAME, f"{node_type} and {engine} {engine_version} offered in {region}")
