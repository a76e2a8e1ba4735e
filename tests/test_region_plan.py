"""The planning scenarios: the shipped region is what its seeded generator writes, and the generated
regions have the recipe's shape (sites, segments, knobs, jobs, budget = as built)."""

import os
import sys

import pytest
import yaml

from flowmodel import config
from flowmodel import scenario as sc

HERE = os.path.dirname(__file__)
sys.path.insert(0, os.path.join(HERE, "..", "experiments"))
import region_plan  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::flowmodel.scenario.ScenarioWarning")


def test_shipped_region_is_the_generators_seed_0():
    with open(os.path.join(HERE, "..", "configs", "region_plan.yaml")) as fh:
        shipped = yaml.safe_load(fh)
    assert shipped == yaml.safe_load(yaml.safe_dump(region_plan.mixed(0)))
    scenario = config.parse(shipped)
    assert len(scenario.fleet.sites) >= 8 and len(scenario.optimize.knobs) >= 60
    assert len(scenario.training) >= 4 and len(scenario.inference) >= 1
    assert len({job.parallelism.size for job in scenario.training}) >= 3  # jobs of different sizes


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_uniform_regions_follow_the_recipe(seed):
    doc = region_plan.uniform(seed)
    assert doc == region_plan.uniform(seed)  # seeded: the same file every time
    scenario = config.parse(doc)
    assert len(scenario.fleet.sites) == 12 and len(scenario.fleet.long_haul) == 66
    assert len(scenario.optimize.knobs) == 78
    assert [job.parallelism.size for job in scenario.training] == [192] * 4
    assert scenario.optimize.budget == pytest.approx(region_plan.as_built_cost(doc), rel=1e-9)
    if seed == 0:
        model = sc.prepare(scenario)
        assert model.groups == ((0,), (1,), (2,), (3,))  # disjoint site triples share no link
    assert region_plan.uniform(seed + 10) != doc


def test_bad_recipe():
    with pytest.raises(ValueError, match="sites: must be a multiple of 3"):
        region_plan.uniform(0, sites=10)
