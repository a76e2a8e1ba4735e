"""The tags a built fabric carries: link tiers and node kinds, read by routing, step time, failures
and cost models (``info.tier``, ``info.node_kind``, the ``tier`` / ``kind`` graph attributes)."""


class Tier:
    """Link tiers of a built fabric (ASTRA-sim imports tag theirs ``dim<d>``)."""

    SCALE_UP = "scale_up"                    # GPU <-> scale-up switch, or GPU <-> GPU in a full mesh
    NIC = "nic"                              # GPU <-> leaf (rack / rail) switch
    LEAF_SPINE = "leaf_spine"
    SPINE_AGGREGATION = "spine_aggregation"
    BORDER = "border"                        # top tier <-> the site's border node
    LONG_HAUL = "long_haul"                  # border <-> border between sites
    ALL = (SCALE_UP, NIC, LEAF_SPINE, SPINE_AGGREGATION, BORDER, LONG_HAUL)
    ASTRA_SCALE_UP = "dim0"                  # an ASTRA-sim import's dimension 0: its scale-up domains


class Kind:
    """Node kinds of a built fabric."""

    GPU = "gpu"
    SCALE_UP_SWITCH = "scale_up_switch"
    LEAF = "leaf"
    SPINE = "spine"
    AGGREGATION = "aggregation"
    BORDER = "border"
    SWITCH = "switch"                        # an ASTRA-sim Switch dimension's switch
    ALL = (GPU, SCALE_UP_SWITCH, LEAF, SPINE, AGGREGATION, BORDER, SWITCH)
