"""The public surface: names that users and later layers import."""

import flowmodel as fm


def test_public_names():
    for name in ("maxmin_rates", "maxmin_structure", "MaxMinStructure", "smooth_maxmin_rates",
                 "fabric", "reference"):
        assert hasattr(fm, name), name
    for name in ("fat_tree", "FatTree", "random_pairs", "TIERS"):
        assert hasattr(fm.fabric, name), name
    for name in ("maxmin_rates", "maxmin_violations", "link_loads"):
        assert hasattr(fm.reference, name), name
