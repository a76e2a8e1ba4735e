"""The public surface: names that users and later layers import."""

import flowmodel as fm


def test_public_names():
    surface = {
        fm: ("maxmin_rates", "maxmin_structure", "MaxMinStructure", "smooth_maxmin_rates", "completion_times",
             "fabric", "reference", "routing", "traffic", "steptime", "optimize", "scenario", "config", "sweep",
             "resilience"),
        fm.fabric: ("fat_tree", "FatTree", "random_pairs", "TIERS", "ScaleUp", "Clos", "Site", "LongHaul", "Fleet",
                    "build", "compile_fabric", "Network", "FabricInfo", "apply_groups", "fail", "meta_24k",
                    "ring", "full_mesh", "ring_of_regions", "to_networkx"),
        fm.routing: ("Router", "Candidates", "SubFlows", "Unreachable", "ecmp", "spray", "qp_scaling", "wcmp",
                     "route"),
        fm.traffic: ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "send_recv",
                     "bus_factor", "Model", "Parallelism", "Training", "Inference", "Background", "llama3_405b",
                     "llama3_405b_training"),
        fm.steptime: ("Options", "Congestion", "route_phase", "phase_time", "plan_training", "step_time",
                      "evaluate_fleet", "one_f_one_b", "evaluate_schedule"),
        fm.optimize: ("split_for_min_mlu", "lp_min_mlu", "minimize", "baseline_value", "Space", "Knob", "CostModel",
                      "grid_search", "random_search", "round_to_allowed"),
        fm.scenario: ("Scenario", "Routing", "Search", "SweepGrid", "FailureSet", "Model", "prepare"),
        fm.reference: ("maxmin_rates", "maxmin_violations", "link_loads"),
    }
    for module, names in surface.items():
        for name in names:
            assert hasattr(module, name), f"{module.__name__}.{name}"
