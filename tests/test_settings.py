"""The Settings as the loader builds them: the defaults, where each value comes from, the GPU AZ and nodes
each phase gets, the cached look-ups; the specs, their parsers and the docs tables generated from them."""

from __future__ import annotations

import pytest

from settings import SettingError, load_settings
from settings.specs import SPECS, settings_table_markdown
from settings.zones import offerings_context_key, zones_context_key
from tests.conftest import REPO, settings_for
from tests.test_settings_bad_values import _error


@pytest.mark.defaults
def test_defaults_are_the_references() -> None:
    s = load_settings({}, {})
    assert (s.cluster_name, s.region, s.kubernetes_version, s.namespace) == (
        "ray-llm-multinode",
        "sa-east-1",
        "1.35",
        "inference",
    )
    assert (s.system_node.name, s.system_node_count, s.system_nodegroup_name) == ("m7i.xlarge", 1, "system-nodes")
    assert (s.gpu_node.name, s.gpu_node_count, s.gpu_nodegroup_name) == ("g6.8xlarge", 2, "gpu-workers")
    assert s.dlc_image == "763104351884.dkr.ecr.sa-east-1.amazonaws.com/ray:serve-llm-cuda-v1.0"
    assert (s.kuberay_version, s.kuberay_namespace, s.ray_version, s.ray_service_name) == (
        "1.7.0",
        "kuberay-operator",
        "2.58.0",
        "ray-llm",
    )
    assert (s.model_id, s.model_source) == ("qwen3.5-9b", "Qwen/Qwen3.5-9B")
    assert s.gpu_az == "sa-east-1a" and s.gpu_az_source == "built-in default"


def test_environment_beats_context() -> None:
    s = settings_for({"GPU_NODE_COUNT": "0"}, {"gpu_node_count": 2, "cluster_name": "from-context"})
    assert s.gpu_node_count == 0 and s.cluster_name == "from-context"


def test_every_region_accepted_has_an_eks_add_on_registry() -> None:
    """The EFA device plugin's image comes from the deploy Region's EKS registry: a Region botocore knows and
    the table (settings/registries.py) does not would fail the synth, so a new Region shows up here."""
    from settings.parsers import known_regions as _known_regions
    from settings.registries import OTHER_ACCOUNTS, eks_addon_registry

    assert {r: eks_addon_registry(r) for r in _known_regions() if eks_addon_registry(r) is None} == {}
    assert eks_addon_registry("sa-east-1") == "602401143452.dkr.ecr.sa-east-1.amazonaws.com"
    assert eks_addon_registry("af-south-1") == "877085696533.dkr.ecr.af-south-1.amazonaws.com"
    assert set(OTHER_ACCOUNTS) <= set(_known_regions())
    assert eks_addon_registry("xx-nowhere-1") is None


def test_capacity_settings() -> None:
    s = settings_for({}, {})
    assert (s.gpu_placement_group, s.gpu_capacity_reservation_id, s.gpu_capacity_block) == ("on", "", False)
    block = settings_for(
        {
            "GPU_CAPACITY_RESERVATION_ID": "cr-0123456789abcdef0",
            "GPU_CAPACITY_RESERVATION_TYPE": "capacity-block",
            "GPU_PLACEMENT_GROUP": "off",
        },
        {},
    )
    assert block.gpu_capacity_block and block.gpu_placement_group == "off"
    named = settings_for({"GPU_CAPACITY_RESERVATION_ID": "cr-0123456789abcdef0", "GPU_PLACEMENT_GROUP": "gpu-pg"}, {})
    assert (named.gpu_placement_group, named.gpu_capacity_block) == ("gpu-pg", False)


def test_cdk_context_keys_are_not_ours_to_reject() -> None:
    settings_for(
        {},
        {
            "@aws-cdk/aws-eks:defaultToAL2023": True,
            "aws:cdk:enable-path-metadata": True,
            "availability-zones:account=1:region=x": ["a"],
        },
    )


def test_cached_look_ups_choose_the_gpu_az_and_reject_one_known_not_to_offer_the_type() -> None:
    context = {
        zones_context_key("sa-east-1"): ["sa-east-1a", "sa-east-1b", "sa-east-1c"],
        offerings_context_key("sa-east-1", "g6.8xlarge"): ["sa-east-1c"],
    }
    s = settings_for({}, context)
    assert s.gpu_az == "sa-east-1c" and s.gpu_az_source == "cached look-up"
    assert "sa-east-1c" in s.availability_zones
    error = _error({"GPU_AZ": "sa-east-1a"}, context)
    assert "offers g6.8xlarge: sa-east-1c" in str(error)


def test_a_gpu_type_without_efa_from_a_cached_look_up_is_rejected() -> None:
    facts = {
        "name": "g6.4xlarge",
        "vcpus": 16,
        "memory_mib": 65536,
        "gpus": 1,
        "gpu_model": "L4",
        "gpu_memory_mib": 24576,
        "network_cards": 1,
        "efa_supported": False,
    }
    error = _error({"GPU_NODE_TYPE": "g6.4xlarge"}, {"ray-llm:instance-type:g6.4xlarge": facts})
    assert "has no EFA" in str(error)


def test_each_phase_gets_nodes_of_its_own() -> None:
    # g6.12xlarge (4 GPUs) alone: one prefill node and one decode node, never both phases on one node.
    s = settings_for({"GPU_NODE_TYPE": "g6.12xlarge"}, {})
    assert (s.prefill_nodes, s.decode_nodes, s.gpu_node_count) == (1, 1, 2)
    # Four engines of each phase still fit one node each; a fifth prefill engine needs a second prefill node.
    assert (
        settings_for(
            {"GPU_NODE_TYPE": "g6.12xlarge", "PREFILL_REPLICAS": "4", "DECODE_REPLICAS": "4"}, {}
        ).gpu_node_count
        == 2
    )
    assert settings_for({"GPU_NODE_TYPE": "g6.12xlarge", "PREFILL_REPLICAS": "5"}, {}).gpu_node_count == 3
    # Tensor parallelism: two 2-GPU engines per g6.12xlarge.
    tp = settings_for({"GPU_NODE_TYPE": "g6.12xlarge", "TENSOR_PARALLEL_SIZE": "2", "PREFILL_REPLICAS": "3"}, {})
    assert (tp.engines_per_node, tp.prefill_nodes, tp.decode_nodes) == (2, 2, 1)
    assert "empty or 2" in str(_error({"GPU_NODE_TYPE": "g6.12xlarge", "GPU_NODE_COUNT": "1"}))
    # p5.48xlarge with the defaults alone synthesizes: one node per phase.
    assert (
        settings_for({"GPU_NODE_TYPE": "p5.48xlarge", "REGION": "us-east-2", "GPU_AZ": "us-east-2b"}, {}).gpu_node_count
        == 2
    )


def test_an_explicit_node_count_must_match_and_zero_parks() -> None:
    assert settings_for({"GPU_NODE_COUNT": "2"}, {}).gpu_node_count == 2
    assert settings_for({"GPU_NODE_COUNT": "0"}, {}).gpu_node_count == 0
    assert settings_for({"GPU_NODE_COUNT": ""}, {}).gpu_node_count == 2


@pytest.mark.defaults
def test_the_docs_settings_table_is_generated_from_the_specs() -> None:
    settings_page = (REPO / "docs" / "settings.md").read_text()
    assert settings_table_markdown() in settings_page, "docs/settings.md's table is stale: run `make docs-tables`"
    assert len(SPECS) == len({s.env for s in SPECS})


@pytest.mark.defaults
def test_the_docs_say_what_changing_each_setting_does() -> None:
    from settings.specs import CHANGE_EFFECTS, change_table_markdown

    assert list(CHANGE_EFFECTS) == [s.env for s in SPECS], "one row per setting, in the settings table's order"
    assert change_table_markdown() in (REPO / "docs" / "day2.md").read_text(), (
        "docs/day2.md's change table is stale: run `make docs-tables`"
    )


@pytest.mark.defaults
def test_every_generated_part_of_the_docs_is_current() -> None:
    """The settings, change, preflight and chart tables and the defaults' quota, between their markers."""
    from tools.maintainer.docs_tables import stale_pages

    assert stale_pages(write=False) == [], "run `make docs-tables`"


def test_a_parser_says_what_it_allows_with_the_numbers_it_checks() -> None:
    """The "Allowed" column and the check come from the same parser: one place for each constraint."""
    from settings.specs import SPECS

    by_env = {s.env: s for s in SPECS}
    replicas = by_env["PREFILL_REPLICAS"]
    assert replicas.allowed_text == "integer 1-64"
    assert replicas.parse("64") == 64
    with pytest.raises(SettingError, match="whole number from 1 to 64"):
        replicas.parse("65")
    assert by_env["RAY_SERVICE_NAME"].allowed_text.endswith("at most 53 characters")
    assert by_env["OBSERVABILITY"].allowed_text == "on or off"
    # Settings that depend on others are parsed together in the loader, and say so if asked alone.
    with pytest.raises(TypeError):
        by_env["GPU_NODE_COUNT"].parse("2")


def test_each_parser_returns_the_type_of_its_settings_field() -> None:
    """The loader hands a spec's parsed value over as it is, under the spec's context key: the field must be of
    the parser's return type (a Flag fills a bool, never the text 'off'; mypy cannot see through the hand-over)."""
    from typing import get_type_hints

    from settings import Settings

    fields = get_type_hints(Settings)
    wrong = {}
    for spec in SPECS:
        if spec.parser is not None:
            returns = get_type_hints(type(spec.parser).__call__)["return"]
            if fields.get(spec.context_key) != returns:
                wrong[spec.env] = (
                    f"Settings.{spec.context_key}: {fields.get(spec.context_key)}, its parser returns {returns}"
                )
    assert wrong == {}


def test_every_parsed_setting_reaches_the_settings_as_its_parser_returns_it() -> None:
    settings = settings_for()
    from tests.pinned import PINNED

    handed = {
        s.env: (getattr(settings, s.context_key), s.parse(PINNED.get(s.env, s.default)))
        for s in SPECS
        if s.parser is not None
    }
    assert {env: pair for env, pair in handed.items() if pair[0] != pair[1] or type(pair[0]) is not type(pair[1])} == {}
    assert settings.observability is False and settings.model_images is False


def test_a_flag_is_a_bool_in_its_own_words() -> None:
    from settings.parsers import Flag

    eager = Flag("true", "false")
    assert (eager("X", "true"), eager("X", "false"), eager.allowed) == (True, False, "true or false")
    with pytest.raises(SettingError, match=r"X='off' is not allowed: true or false"):
        eager("X", "off")


def _read_by_the_stacks(field: str) -> list[str]:
    """The modules of stacks/ and k8s_constructs/ that read `field` of the Settings."""
    import re

    pattern = re.compile(rf"\.{re.escape(field)}\b")
    return sorted(
        str(p.relative_to(REPO))
        for d in ("stacks", "k8s_constructs")
        for p in (REPO / d).rglob("*.py")
        if pattern.search(p.read_text())
    )


def test_a_preflight_only_setting_is_read_by_no_stack() -> None:
    """ "no effect on deployed stacks" (PREFLIGHT_ONLY) holds only while no stack or manifest reads the setting."""
    from settings.specs import CHANGE_EFFECTS, PREFLIGHT_ONLY

    read = {
        env: _read_by_the_stacks(env.lower()) for env, (effect, _) in CHANGE_EFFECTS.items() if effect == PREFLIGHT_ONLY
    }
    assert {env: modules for env, modules in read.items() if modules} == {}
    assert _read_by_the_stacks("gpu_az"), "the search finds a setting the stacks read"


def test_every_make_target_a_message_names_exists() -> None:
    """Errors, fixes and notices name current procedures: each `make X` in the code is a target of the Makefile."""
    import re

    targets = set(re.findall(r"^([a-z][a-z-]*):", (REPO / "Makefile").read_text(), re.MULTILINE))
    named = {
        (str(path.relative_to(REPO)), target)
        for folder in ("settings", "preflight", "stacks", "k8s_constructs", "tools")
        for path in (REPO / folder).rglob("*.py")
        for target in re.findall(r"`make ([a-z][a-z-]*)", path.read_text())
    }
    assert named and {(path, target) for path, target in named if target not in targets} == set()
