"""The Rule enum: every rule the compiler decides by is one member, each named in
docs/architecture.md; a Plan refuses a rule named by a string."""
import dataclasses
import re
from pathlib import Path

import pytest

from aie_utils import from_name
from iron.compiler.compile import compile_program
from iron.plan.describe import describe
from iron.plan.rules import Rule
from tests.compiler import designs

ARCHITECTURE = Path(__file__).parents[2] / "docs" / "architecture.md"


def test_every_rule_is_documented_and_named_by_its_value():
    documented = set(re.findall(r"`([a-z_]+)`", ARCHITECTURE.read_text()))
    assert {rule.value for rule in Rule} <= documented
    assert all(rule.name == rule.value.upper() for rule in Rule)


def test_a_plan_takes_rules_as_members_only_and_describe_prints_their_names():
    plan = compile_program(designs.trace(designs.walk()), from_name("npu2"))
    assert [rule for rule, _ in plan.rules] == [Rule.SNAKE_ORDER, Rule.SNAKE_ORDER, Rule.SHIM_CHANNELS]
    assert "  snake_order: g0 on tile_0_2\n" in describe(plan)
    with pytest.raises(TypeError, match="snake_order"):
        dataclasses.replace(plan, rules=(("snake_order", "g0 on tile_0_2"),))
